"""The mesh the chaos suite breaks: every service a real process, Envoy in front, on loopback.

One AOF Redis behind the tests' TCP proxy (``tests.tcp_proxy``: every service's connections go
through it, so Redis can be stalled or a connection cut half-open), one scheduler and two
gateway processes on their own ports (as ``conch up`` starts them, each supervised: the suite
restarts what it kills), two Python workers serving ``chaos_recorder`` (two instances each), the
xDS control plane and Envoy. Each process runs in its own session, so a signal reaches it and
its children (a Python worker's model processes) and nothing else.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import redis

from conch import envoy_edge
from conch.ports import free_port
from tests.chaos.aof_redis import AofRedis

ROOT = Path(__file__).resolve().parents[2]
MODEL = "chaos_recorder"
ADMIN_TOKEN = "chaos-admin-token"
WORKERS = ("worker-a", "worker-b")
GATEWAYS = ("gateway-a", "gateway-b")


@dataclass
class Service:
    name: str
    argv: list[str]
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0


class ChaosMesh:
    def __init__(self, workdir: Path, repository: Path, envoy_path: str):
        self.workdir = workdir
        self.repository = repository
        self.record_dir = workdir / "records"
        self.log_dir = workdir / "logs"
        self.record_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.redis = AofRedis(workdir / "redis")
        self.proxy_port = free_port()
        self.proxy: subprocess.Popen[str] | None = None
        self.services: dict[str, Service] = {}
        self.gateway_ports = {name: free_port() for name in GATEWAYS}
        self.edge = envoy_edge.plan_edge(
            self.proxy_url,
            free_port(),
            workdir=workdir / "edge",
            envoy_path=envoy_path,
            concurrency=1,
            log_level="WARNING",
        )

    # --- addresses -------------------------------------------------------------------------

    @property
    def proxy_url(self) -> str:
        """What the services use: Redis through the proxy."""
        return f"redis://127.0.0.1:{self.proxy_port}/0"

    @property
    def url(self) -> str:
        """Envoy's public listener: where the load goes."""
        return self.edge.public_url

    def gateway_url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.gateway_ports[name]}"

    def inspect(self) -> redis.Redis:
        """A client straight to Redis (not through the proxy) for the suite's own checks."""
        return redis.Redis.from_url(self.redis.url, socket_timeout=5, socket_connect_timeout=2)

    # --- start and stop ----------------------------------------------------------------------

    def start(self) -> ChaosMesh:
        self.redis.start()
        self.proxy = subprocess.Popen(
            [sys.executable, "-m", "tests.tcp_proxy", str(self.proxy_port),
             str(self.redis.port), "--control"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
            start_new_session=True,
        )  # fmt: skip
        assert self.proxy.stdout is not None
        assert self.proxy.stdout.readline().startswith("listening")
        common = {
            "CONCH_REDIS_URL": self.proxy_url,
            "CONCH_LOG_FORMAT": "json",
            "PYTHONUNBUFFERED": "1",
        }
        python = sys.executable
        self._add(Service("scheduler", [python, "-m", "scheduler"],
                          {**common, "CONCH_SCHEDULER_HEALTH_PORT": "0"}))  # fmt: skip
        for name in WORKERS:
            self._add(
                Service(
                    name,
                    [python, "-m", "workers", "--backend", "python"],
                    {
                        **common,
                        "CONCH_WORKER_MODEL_REPOSITORY": str(self.repository),
                        "CONCH_WORKER_HEALTH_PORT": "0",
                        "CONCH_CHAOS_RECORD_DIR": str(self.record_dir),
                        "CONCH_CHAOS_LABEL": name,
                    },
                )
            )
        for name in GATEWAYS:
            self._add(
                Service(
                    name,
                    [python, "-m", "gateway"],
                    {
                        **common,
                        "CONCH_GATEWAY_HOST": "127.0.0.1",
                        "CONCH_GATEWAY_ADVERTISE_HOST": "127.0.0.1",
                        "CONCH_GATEWAY_HTTP_PORT": str(self.gateway_ports[name]),
                        "CONCH_GATEWAY_PROCESSES": "1",
                        "CONCH_GATEWAY_ADMIN_TOKEN": ADMIN_TOKEN,
                        "PROMETHEUS_MULTIPROC_DIR": str(self.workdir / f"metrics-{name}"),
                    },
                )
            )
        for name in self.services:
            self.launch(name)
        self.wait_ready()
        self._add(Service("controlplane", self.edge.controlplane.argv,
                          {**common, **self.edge.controlplane.env}))  # fmt: skip
        self.launch("controlplane")
        _wait_http(self.edge.controlplane_health_url, 60, self)
        self._add(Service("envoy", self.edge.envoy.argv, self.edge.envoy.env))
        self.launch("envoy")
        _wait_http(self.edge.ready_url, 60, self)
        self.wait_serving(60)
        return self

    def _add(self, service: Service) -> None:
        self.services[service.name] = service

    def launch(self, name: str) -> None:
        service = self.services[name]
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - owned by the process
        service.process = subprocess.Popen(
            service.argv,
            env={**os.environ, **service.env},
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
        )
        log.close()

    def stop(self) -> None:
        for name in reversed(list(self.services)):
            self.signal(name, signal.SIGCONT)
            self.signal(name, signal.SIGTERM)
        for service in self.services.values():
            if service.process is None:
                continue
            try:
                service.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(service.process.pid, signal.SIGKILL)
                service.process.wait(timeout=5)
        if self.proxy is not None:
            self.proxy.kill()
            self.proxy.wait(timeout=5)
        self.redis.stop()

    # --- faults' tools ---------------------------------------------------------------------

    def pid(self, name: str) -> int:
        process = self.services[name].process
        assert process is not None
        return process.pid

    def signal(self, name: str, sig: signal.Signals) -> None:
        """``sig`` to the service's whole process group (a worker and its model processes)."""
        process = self.services[name].process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)

    def kill(self, name: str) -> None:
        self.signal(name, signal.SIGKILL)
        process = self.services[name].process
        assert process is not None
        process.wait(timeout=30)

    def restart(self, name: str) -> None:
        """As ``conch up``'s supervisor does for a service that died."""
        self.services[name].restarts += 1
        self.launch(name)

    @contextlib.contextmanager
    def holding(self, worker: str, timeout_s: float = 20.0) -> Iterator[None]:
        """Inside: one of ``worker``'s model instances is known to be mid-batch (it waits in
        ``execute`` on a hold file); leaving releases it."""
        hold = self.record_dir / f"hold-{worker}"
        for marker in self.record_dir.glob(f"holding-{worker}-*"):
            marker.unlink()
        hold.touch()
        try:
            deadline = time.monotonic() + timeout_s
            while not any(self.record_dir.glob(f"holding-{worker}-*")):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{worker} took no batch within {timeout_s} s")
                time.sleep(0.005)
            yield
        finally:
            hold.unlink(missing_ok=True)

    def proxy_command(self, line: str) -> str:
        assert self.proxy is not None and self.proxy.stdin and self.proxy.stdout
        self.proxy.stdin.write(line + "\n")
        self.proxy.stdin.flush()
        return self.proxy.stdout.readline().strip()

    # --- health ----------------------------------------------------------------------------

    def dead_services(self) -> list[str]:
        return [
            name
            for name, service in self.services.items()
            if service.process is None or service.process.poll() is not None
        ]

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        """Every gateway answers that the model is ready."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._raise_if_dead()
            try:
                if all(
                    httpx.get(
                        f"{self.gateway_url(g)}/v2/models/{MODEL}/ready", timeout=1
                    ).status_code
                    == 200
                    for g in GATEWAYS
                ):
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"mesh not ready within {timeout_s} s: {self.tails()}")

    def wait_serving(self, timeout_s: float) -> None:
        """An inference through Envoy and through each gateway answers correctly."""
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            self._raise_if_dead()
            try:
                if all(
                    probe(base, 999_000_000 + i)
                    for i, base in enumerate([self.url, *map(self.gateway_url, GATEWAYS)])
                ):
                    return
            except httpx.HTTPError as exc:
                last = repr(exc)
            time.sleep(0.2)
        raise TimeoutError(f"mesh not serving within {timeout_s} s ({last}): {self.tails()}")

    def _raise_if_dead(self) -> None:
        dead = self.dead_services()
        if dead:
            raise RuntimeError(f"{dead} exited: {self.tails()}")

    def tails(self, names: list[str] | None = None, chars: int = 2500) -> str:
        out = []
        for name in names or list(self.services):
            path = self.log_dir / f"{name}.log"
            if path.exists():
                out.append(f"--- {name}\n{path.read_text(errors='replace')[-chars:]}")
        return "\n".join(out)

    def processes(self) -> dict[str, psutil.Process]:
        """Every process of the mesh by a stable label (model processes under their worker)."""
        found: dict[str, psutil.Process] = {}
        owners: dict[str, int | None] = {name: self.pid(name) for name in self.services}
        owners["redis"] = self.redis.process.pid if self.redis.process else None
        owners["proxy"] = self.proxy.pid if self.proxy else None
        for name, pid in owners.items():
            if pid is None:
                continue
            with contextlib.suppress(psutil.Error):
                process = psutil.Process(pid)
                found[name] = process
                for index, child in enumerate(process.children(recursive=True)):
                    found[f"{name}/child{index}"] = child
        return found


def probe(base: str, number: int) -> bool:
    body = {"id": f"probe-{number}", "inputs": [_id_input(number)]}
    response = httpx.post(f"{base}/v2/models/{MODEL}/infer", json=body, timeout=10)
    if response.status_code != 200:
        return False
    return response.json()["outputs"][0]["data"] == [3 * number + 1]


def _id_input(number: int) -> dict[str, object]:
    return {"name": "ID", "shape": [1, 1], "datatype": "INT64", "data": [number]}


def _wait_http(url: str, timeout_s: float, mesh: ChaosMesh) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        mesh._raise_if_dead()
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1).status_code == 200:
                return
        time.sleep(0.1)
    raise TimeoutError(f"{url} not ready within {timeout_s} s: {mesh.tails()}")
