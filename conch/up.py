"""``conch up``: the whole mesh on this machine, each service a supervised process.

It scans the model repositories (``conch.up_plan``), checks its ports (``conch.port_plan``),
starts a private Redis where none is configured, the schedulers, the worker services of each
backend in the repositories (``conch.worker_plan``), the gateway, and on request Prometheus and
Envoy; it waits for the models of its control mode to be ready, then keeps what it started running
until Ctrl-C stops it all, giving each service ``--exit-timeout-secs`` to drain. Start-up failures
are final: a port in use, a service that cannot start (``conch.supervisor``), a model that fails
to load (unless ``--exit-on-error=false``), or a mesh not ready within ``--ready-timeout`` stops
everything and exits non-zero with the first error line. The flags, in Triton's syntax, are
``conch.arguments``; the services' settings they become, ``conch.service_env``.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import signal
import sys

from conch import cache_config, edge_up, port_plan
from conch.child_watch import ChildWatch
from conch.load_errors import LoadErrors
from conch.local_prometheus import LocalPrometheus
from conch.mesh_ready import ModelFailed, wait_ready
from conch.ports import free_port
from conch.private_redis import PrivateRedis
from conch.private_redis_cluster import PrivateRedisCluster
from conch.service_env import (
    gateway_env,
    gateway_probe_tls,
    scheduler_control_env,
    worker_env,
)
from conch.supervisor import ServiceSpec, StartupFailed, Supervisor
from conch.up_args import UsageError
from conch.up_plan import plan_models
from conch.worker_plan import plan_workers, visible_gpus
from shared.runtime import clock, cpu_budget, gpu, logs
from shared.storage.repositories import default_cache_dir
from shared.wire.errors import ConchError

# The watch's safety net once all serve: a child's exit (SIGCHLD) or a stop wakes it at once.
IDLE_WATCH_S = 60.0

log = logging.getLogger("conch.up")


def up(args: argparse.Namespace) -> int:
    logs.setup("conch-up", args.log_level, args.log_format)
    try:
        plan = plan_models(args, default_cache_dir() / "conch-up")
    except ConchError as exc:
        print(f"conch up: {exc.message}", file=sys.stderr)
        return 2
    except UsageError as exc:
        print(f"conch up: {exc}", file=sys.stderr)
        return 2
    if plan.failed and args.exit_on_error:
        print(f"conch up: {ModelFailed(plan.failed)}", file=sys.stderr, flush=True)
        return 1
    for name, error in sorted(plan.failed.items()):
        log.error("model skipped", extra={"model": name, "error": error})
    problem = port_plan.clash(port_plan.ports_of(args))
    if problem is not None:
        print(f"conch up: {problem}", file=sys.stderr, flush=True)
        return 2
    try:
        workers = plan_workers(
            plan.by_backend, args.workers_per_backend, visible_gpus(gpu.gpu_count())
        )
        cpu_budget.gateway_processes(args.gateways)
    except ConchError as exc:
        print(f"conch up: {exc.message}", file=sys.stderr)
        return 2

    try:
        cache = cache_config.parse(args.cache_config)
    except ValueError as exc:
        print(f"conch up: {exc}", file=sys.stderr)
        return 2

    started_ms = clock.now_ms()
    private: PrivateRedis | None = None
    cluster: PrivateRedisCluster | None = None
    cache_redis: PrivateRedis | None = None
    redis_url = os.environ.get("CONCH_REDIS_URL")
    if not redis_url and args.redis_cluster:
        try:
            cluster = PrivateRedisCluster(masters=args.redis_cluster).start()
        except ConchError as exc:
            print(f"conch up: {exc.message}", file=sys.stderr)
            return 2
        redis_url = cluster.url
        log.info("private redis cluster started", extra={"url": redis_url})
    elif not redis_url:
        private = PrivateRedis().start()
        redis_url = private.url
        log.info("private redis started", extra={"url": redis_url, "tcp_url": private.tcp_url})
    cache_url = ""
    if cache is not None and cache.kind == "local":
        cache_redis = PrivateRedis(
            extra_args=("--maxmemory", str(cache.size_bytes), "--maxmemory-policy", "allkeys-lru")
        ).start()
        cache_url = cache_redis.url
        log.info("response cache started", extra={"url": cache_url, "bytes": cache.size_bytes})
    elif cache is not None:
        cache_url = cache.url
    common = {
        "CONCH_REDIS_URL": redis_url,
        "CONCH_LOG_FORMAT": args.log_format,
        "CONCH_LOG_LEVEL": args.log_level,
        "PYTHONUNBUFFERED": "1",
    }
    admin_token = args.admin_token or secrets.token_urlsafe(24)
    python = sys.executable
    # Each service drains for up to --exit-timeout-secs on SIGTERM, then has 5 s to exit.
    supervisor = Supervisor(
        grace_s=args.exit_timeout_secs + 5.0, start_attempts=args.start_attempts
    )
    stopping = False
    # Prometheus targets (job -> host:port): each service's /metrics.
    targets: dict[str, list[str]] = {"conch-scheduler": [], "conch-worker": []}
    prometheus = None

    def request_stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    failures = LoadErrors(redis_url, started_ms)
    try:
        for index in range(args.schedulers):
            port = free_port()
            targets["conch-scheduler"].append(f"127.0.0.1:{port}")
            supervisor.start(
                ServiceSpec(
                    f"scheduler-{index}",
                    [python, "-m", "scheduler"],
                    {
                        **common,
                        "CONCH_SCHEDULER_HEALTH_PORT": str(port),
                        "CONCH_SCHEDULER_DEAD_BOUND_MS": str(args.dead_bound_ms),
                        "CONCH_SCHEDULER_MAX_DELIVERIES": str(args.max_deliveries),
                        **scheduler_control_env(args),
                    },
                    probe=f"http://127.0.0.1:{port}/health/ready",
                )
            )
        for worker in workers:
            port = free_port()
            targets["conch-worker"].append(f"127.0.0.1:{port}")
            supervisor.start(
                ServiceSpec(
                    worker.name,
                    [python, "-m", "workers", "--backend", worker.backend],
                    {
                        **common,
                        **worker.env,
                        **worker_env(args, default_cache_dir() / worker.name),
                        "CONCH_WORKER_HEALTH_PORT": str(port),
                        "CONCH_WORKER_DEAD_BOUND_MS": str(args.dead_bound_ms),
                        "CONCH_WORKER_MAX_DELIVERIES": str(args.max_deliveries),
                    },
                    probe=f"http://127.0.0.1:{port}/health/ready",
                )
            )
        scheme = "https" if args.http_use_ssl else "http"
        url = f"{scheme}://{_display_host(args.host)}:{args.http_port}"
        probe_tls = gateway_probe_tls(args)
        supervisor.start(
            ServiceSpec(
                "gateway",
                [python, "-m", "gateway"],
                {**common, **gateway_env(args, admin_token, cache_url)},
                probe=f"{url}/v2/health/live",
                probe_tls=probe_tls,
            )
        )
        targets["conch-gateway"] = [f"{_display_host(args.host)}:{args.http_port}"]
        if args.with_prometheus:
            prometheus = _start_prometheus(targets, args.prometheus_port)
        models = wait_ready(
            url,
            plan.wait_for,
            args.ready_timeout,
            supervisor,
            lambda: stopping,
            failures,
            exit_on_error=args.exit_on_error,
            context=probe_tls,
        )
        if models is None:
            return 0 if stopping else 1
        if args.with_envoy:
            url = edge_up.start_edge(supervisor, redis_url, args, common)
        print(f"Conch is ready at {url}  (models: {', '.join(models) or 'none'})", flush=True)
        if args.grpc_port:
            tls = " (TLS)" if args.grpc_use_ssl else ""
            print(
                f"gRPC (KServe v2) at {_display_host(args.host)}:{args.grpc_port}{tls}", flush=True
            )
        shown = f"{redis_url} (also {private.tcp_url})" if private else redis_url
        print(f"Redis: {shown}  |  Ctrl-C stops everything", flush=True)
        if not args.admin_token:
            print(f"Admin token (generated): {admin_token}", flush=True)
        print(f"  conch admin --url {url} --token <admin token> weights get <model>", flush=True)
        watch = ChildWatch()  # woken by a child's exit or a stop signal, not a tick
        try:
            while not stopping:
                supervisor.check()
                if private is not None:
                    _restart_if_exited(private)
                settling = supervisor.settling() or (
                    private is not None
                    and private.process is not None
                    and private.process.poll() is not None
                )
                watch.wait(0.5 if settling else IDLE_WATCH_S)
        finally:
            watch.close()
        return 0
    except (StartupFailed, ModelFailed) as exc:
        print(f"conch up: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        log.info("stopping the mesh")
        failures.close()
        supervisor.stop_all()
        if prometheus is not None:
            prometheus.stop()
        if private is not None:
            private.stop()
        if cluster is not None:
            cluster.stop()
        if cache_redis is not None:
            cache_redis.stop()


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


def _start_prometheus(targets: dict[str, list[str]], port: int) -> LocalPrometheus | None:
    """A local Prometheus with the project's rules scraping every service; None if missing."""
    prometheus = LocalPrometheus(targets, port)
    try:
        prometheus.start().wait_ready()
    except (OSError, RuntimeError, TimeoutError) as exc:
        print(f"conch up: Prometheus not started: {exc}", file=sys.stderr, flush=True)
        prometheus.stop()
        return None
    config = prometheus.config_path
    print(f"Prometheus: {prometheus.url}  (config {config}; first samples after ~6 s)", flush=True)
    return prometheus


def _display_host(host: str) -> str:
    return "localhost" if host in ("0.0.0.0", "127.0.0.1", "::") else host
