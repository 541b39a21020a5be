"""The ``conch`` command: ``conch up`` runs the whole mesh; the other verbs run one service."""

from __future__ import annotations

import argparse
import contextlib
import http.client
import logging
import os
import secrets
import signal
import sys
import time
from pathlib import Path

from shared import http_wait, logs, repository
from shared.errors import ConchError
from shared.ports import free_port
from shared.redis_server import PrivateRedis
from shared.supervisor import ServiceSpec, Supervisor

log = logging.getLogger("conch.up")

# Backends served by a worker service; anything else in a repository is reported, not started.
WORKER_BACKENDS = ("onnxruntime", "pytorch", "python", "tensorrt")


# Verbs that run another module of the project in place of this process.
_SERVICE_MODULES = {
    "gateway": "gateway",
    "scheduler": "scheduler",
    "worker": "workers",
    "controlplane": "controlplane",
    "bench": "bench",
}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in _SERVICE_MODULES:
        module = _SERVICE_MODULES[argv[0]]
        os.execv(sys.executable, [sys.executable, "-m", module, *argv[1:]])
    if argv and argv[0] == "admin":
        from shared import admin_cli

        raise SystemExit(admin_cli.main(argv[1:]))
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "up":
        raise SystemExit(up(args))
    parser.print_help()
    raise SystemExit(2)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="conch", description="Conch inference-serving mesh")
    sub = parser.add_subparsers(dest="command")
    up_parser = sub.add_parser("up", help="start Redis, gateway, scheduler and workers")
    up_parser.add_argument("--model-repository", required=True, type=Path)
    up_parser.add_argument("--http-port", type=int, default=8000)
    up_parser.add_argument(
        "--grpc-port", type=int, default=8001, help="KServe v2 gRPC port (0: no gRPC)"
    )
    up_parser.add_argument("--host", default="127.0.0.1", help="address the gateway binds")
    up_parser.add_argument("--gateways", type=int, default=2, help="gateway processes")
    up_parser.add_argument("--schedulers", type=int, default=1)
    up_parser.add_argument("--workers-per-backend", type=int, default=1)
    up_parser.add_argument(
        "--with-envoy", action="store_true", help="put Envoy (configured over xDS) in front"
    )
    up_parser.add_argument("--envoy-port", type=int, default=8080)
    up_parser.add_argument("--ready-timeout", type=float, default=180.0)
    up_parser.add_argument("--log-format", choices=["json", "text"], default="json")
    up_parser.add_argument("--log-level", default="INFO")
    up_parser.add_argument(
        "--admin-token",
        default=os.environ.get("CONCH_ADMIN_TOKEN", ""),
        help="admin API token (default: $CONCH_ADMIN_TOKEN, else a generated one, printed)",
    )
    up_parser.add_argument(
        "--allow-anonymous",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="allow inference without an API key",
    )
    up_parser.add_argument(
        "--with-prometheus",
        action="store_true",
        help="also start a local Prometheus (the system's `prometheus`) scraping every service",
    )
    up_parser.add_argument("--prometheus-port", type=int, default=9090)
    sub.add_parser("gateway", help="run one gateway service (uvicorn, several processes)")
    sub.add_parser("scheduler", help="run one scheduler service")
    sub.add_parser("worker", help="run one worker service: conch worker --backend NAME")
    sub.add_parser("admin", help="admin API client: conch admin weights|tenants|shadow|models")
    sub.add_parser("controlplane", help="run the xDS control plane for Envoy")
    sub.add_parser("bench", help="benchmark against the shared harness: conch bench --help")
    return parser


def up(args: argparse.Namespace) -> int:
    logs.setup("conch-up", args.log_level, args.log_format)
    repo = args.model_repository.resolve()
    try:
        scan = repository.scan(repo)
    except ConchError as exc:
        print(f"conch up: {exc.message}", file=sys.stderr)
        return 2
    for name, error in scan.errors.items():
        log.error("model skipped", extra={"model": name, "error": error})
    backends = sorted({m.config.backend for m in scan.models.values()})
    unknown = [b for b in backends if b not in WORKER_BACKENDS]
    for backend in unknown:
        log.warning("no worker service for backend", extra={"backend": backend})
    backends = [b for b in backends if b in WORKER_BACKENDS]
    if not backends:
        print(f"conch up: no servable model in {repo}", file=sys.stderr)
        return 2

    private: PrivateRedis | None = None
    redis_url = os.environ.get("CONCH_REDIS_URL")
    if not redis_url:
        private = PrivateRedis().start()
        redis_url = private.url
        log.info("private redis started", extra={"url": redis_url, "tcp_url": private.tcp_url})
    common = {
        "CONCH_REDIS_URL": redis_url,
        "CONCH_LOG_FORMAT": args.log_format,
        "CONCH_LOG_LEVEL": args.log_level,
        "PYTHONUNBUFFERED": "1",
    }
    admin_token = args.admin_token or secrets.token_urlsafe(24)
    python = sys.executable
    supervisor = Supervisor()
    stopping = False
    # Prometheus targets (job -> host:port): each service's /metrics.
    targets: dict[str, list[str]] = {"conch-scheduler": [], "conch-worker": []}
    prometheus = None

    def request_stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    try:
        for index in range(args.schedulers):
            port = free_port()
            targets["conch-scheduler"].append(f"127.0.0.1:{port}")
            supervisor.start(
                ServiceSpec(
                    f"scheduler-{index}",
                    [python, "-m", "scheduler"],
                    {**common, "CONCH_SCHEDULER_HEALTH_PORT": str(port)},
                )
            )
        for backend in backends:
            for index in range(args.workers_per_backend):
                port = free_port()
                targets["conch-worker"].append(f"127.0.0.1:{port}")
                supervisor.start(
                    ServiceSpec(
                        f"worker-{backend}-{index}",
                        [python, "-m", "workers", "--backend", backend],
                        {
                            **common,
                            "CONCH_WORKER_MODEL_REPOSITORY": str(repo),
                            "CONCH_WORKER_HEALTH_PORT": str(port),
                        },
                    )
                )
        supervisor.start(
            ServiceSpec(
                "gateway",
                [python, "-m", "gateway"],
                {
                    **common,
                    "CONCH_GATEWAY_HOST": args.host,
                    "CONCH_GATEWAY_HTTP_PORT": str(args.http_port),
                    "CONCH_GATEWAY_PROCESSES": str(args.gateways),
                    "CONCH_GATEWAY_GRPC_PORT": str(args.grpc_port),
                    "CONCH_GATEWAY_ADMIN_TOKEN": admin_token,
                    "CONCH_GATEWAY_ALLOW_ANONYMOUS": str(args.allow_anonymous).lower(),
                },
            )
        )
        url = f"http://{_display_host(args.host)}:{args.http_port}"
        targets["conch-gateway"] = [f"{_display_host(args.host)}:{args.http_port}"]
        if args.with_prometheus:
            prometheus = _start_prometheus(targets, args.prometheus_port)
        models = sorted(m for m, entry in scan.models.items() if entry.config.backend in backends)
        ready = _wait_ready(url, models, args.ready_timeout, supervisor, lambda: stopping)
        if ready and args.with_envoy:
            url = _start_edge(supervisor, redis_url, args, common)
        if ready:
            print(f"Conch is ready at {url}  (models: {', '.join(models)})", flush=True)
            if args.grpc_port:
                print(
                    f"gRPC (KServe v2) at {_display_host(args.host)}:{args.grpc_port}", flush=True
                )
            shown = f"{redis_url} (also {private.tcp_url})" if private else redis_url
            print(f"Redis: {shown}  |  Ctrl-C stops everything", flush=True)
            if not args.admin_token:
                print(f"Admin token (generated): {admin_token}", flush=True)
            print(
                f"  conch admin --url {url} --token <admin token> weights get <model>", flush=True
            )
        while not stopping:
            supervisor.check()
            if private is not None:
                _restart_if_exited(private)
            time.sleep(0.5)
        return 0
    finally:
        log.info("stopping the mesh")
        supervisor.stop_all()
        if prometheus is not None:
            prometheus.stop()
        if private is not None:
            private.stop()


def _restart_if_exited(private: PrivateRedis) -> None:
    """`conch up` keeps what it started running, its Redis too: same port, same socket, so every
    service reconnects by itself and its heartbeats restore the registry. Requests that were
    queued in the dead server are answered by their gateways' deadlines."""
    assert private.process is not None
    code = private.process.poll()
    if code is None:
        return
    log.warning("private redis exited; restarting it", extra={"code": code, "url": private.url})
    try:
        private.start()
    except ConchError as exc:  # tried again on the next turn of the watch loop
        log.error("private redis did not restart", extra={"error": exc.message})
        return
    log.info("private redis restarted", extra={"url": private.url})


def _start_prometheus(targets: dict[str, list[str]], port: int):
    """A local Prometheus with the project's rules scraping every service; None if missing."""
    from shared.prometheus_local import LocalPrometheus

    prometheus = LocalPrometheus(targets, port)
    try:
        prometheus.start().wait_ready()
    except (OSError, RuntimeError, TimeoutError) as exc:
        print(f"conch up: Prometheus not started: {exc}", file=sys.stderr, flush=True)
        prometheus.stop()
        return None
    print(
        f"Prometheus: {prometheus.url}  (config {prometheus.config_path}; "
        "first samples after ~6 s)",
        flush=True,
    )
    return prometheus


def _start_edge(
    supervisor: Supervisor, redis_url: str, args: argparse.Namespace, common: dict[str, str]
) -> str:
    """Start the xDS control plane, then Envoy; Envoy learns the gateways from Redis."""
    from controlplane.launch import plan_edge  # only `--with-envoy` needs grpcio/xds-protos

    plan = plan_edge(redis_url, args.envoy_port, log_level=args.log_level)
    supervisor.start(
        ServiceSpec("controlplane", plan.controlplane.argv, {**common, **plan.controlplane.env})
    )
    _wait_for(plan.controlplane_health_url, 60, supervisor)
    supervisor.start(ServiceSpec("envoy", plan.envoy.argv, plan.envoy.env))
    _wait_for(plan.ready_url, 60, supervisor)
    print(f"Envoy (edge) at {plan.public_url} -> gateways at port {args.http_port}", flush=True)
    return plan.public_url


def _wait_for(url: str, timeout_s: float, supervisor: Supervisor) -> None:
    if not http_wait.wait_ok(url, timeout_s, supervisor.check):
        log.error("not ready in time", extra={"url": url})


def _display_host(host: str) -> str:
    return "localhost" if host in ("0.0.0.0", "127.0.0.1", "::") else host


def _get_status(url: str, path: str) -> int:
    host_port = url.split("//", 1)[1]
    host, _, port = host_port.partition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=2)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    finally:
        conn.close()


def _wait_ready(url, models, timeout_s, supervisor, stopped) -> bool:
    """Wait for the gateway and every model to be READY, printing progress as models come up."""
    deadline = time.monotonic() + timeout_s
    reported: set[str] = set()
    while time.monotonic() < deadline and not stopped():
        supervisor.check()
        with contextlib.suppress(OSError, http.client.HTTPException):
            if _get_status(url, "/v2/health/ready") == 200:
                for model in models:
                    if (
                        model not in reported
                        and _get_status(url, f"/v2/models/{model}/ready") == 200
                    ):
                        reported.add(model)
                        print(f"  model ready: {model}", flush=True)
                if len(reported) == len(models):
                    return True
        time.sleep(0.3)
    missing = sorted(set(models) - reported)
    if not stopped():
        print(
            f"conch up: not every model became ready within {timeout_s:.0f} s "
            f"(waiting for: {', '.join(missing)}); the mesh keeps running, see the logs above",
            flush=True,
        )
    return False


if __name__ == "__main__":
    main()
