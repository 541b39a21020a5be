"""The mesh the chaos suite breaks: every service a real process, Envoy in front, on loopback.

One AOF Redis behind the tests' TCP proxy (``tests.tcp_proxy``: every service's connections go
through it, so Redis can be stalled or a connection cut half-open), one scheduler and two
gateway processes on their own ports (as ``conch up`` starts them, each supervised: the suite
restarts what it kills), two Python workers serving ``chaos_recorder`` (two instances each), the
xDS control plane and Envoy. It is a ``tests.mesh.Mesh`` (each process in its own session, so a
signal reaches it and its children, a Python worker's model processes, and nothing else; ``kill``,
``signal``, ``restart``, ``dead_services``) with this topology and the suite's own checks.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import redis

from conch import envoy_edge
from conch.ports import free_port
from tests.chaos.aof_redis import AofRedis
from tests.mesh import Mesh
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
MODEL = "chaos_recorder"
ADMIN_TOKEN = "chaos-admin-token"
WORKERS = ("worker-a", "worker-b")
GATEWAYS = ("gateway-a", "gateway-b")


class ChaosMesh(Mesh):
    def __init__(self, workdir: Path, repository: Path, envoy_path: str):
        self.workdir = workdir
        self.record_dir = workdir / "records"
        self.record_dir.mkdir(parents=True, exist_ok=True)
        (workdir / "logs").mkdir(parents=True, exist_ok=True)
        self.redis = AofRedis(workdir / "redis")
        self.proxy_port = free_port()
        self.proxy: subprocess.Popen[str] | None = None
        self.gateway_ports = {name: free_port() for name in GATEWAYS}
        # Every service reaches Redis through the proxy.
        super().__init__(
            f"redis://127.0.0.1:{self.proxy_port}/0",
            repository,
            log_dir=workdir / "logs",
            log_format="json",
        )
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
        return self.redis_url

    @property
    def url(self) -> str:  # type: ignore[override]
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
        self.start_scheduler()
        for name in WORKERS:
            self.start_worker(
                name,
                "python",
                CONCH_CHAOS_RECORD_DIR=str(self.record_dir),
                CONCH_CHAOS_LABEL=name,
            )
        for name in GATEWAYS:
            self.start_gateway(
                1,
                name,
                CONCH_GATEWAY_ADVERTISE_HOST="127.0.0.1",
                CONCH_GATEWAY_HTTP_PORT=str(self.gateway_ports[name]),
                CONCH_GATEWAY_ADMIN_TOKEN=ADMIN_TOKEN,
                PROMETHEUS_MULTIPROC_DIR=str(self.workdir / f"metrics-{name}"),
            )
        # Every gateway answers that the model is ready.
        self.wait_ready([MODEL], 90, urls=[self.gateway_url(g) for g in GATEWAYS])
        self.start_process("controlplane", self.edge.controlplane.argv, self.edge.controlplane.env)
        self.wait_http(self.edge.controlplane_health_url, 60)
        self.start_process("envoy", self.edge.envoy.argv, self.edge.envoy.env)
        self.wait_http(self.edge.ready_url, 60)
        self.wait_serving(60)
        return self

    def stop(self) -> None:
        super().stop()
        if self.proxy is not None:
            self.proxy.kill()
            self.proxy.wait(timeout=5)
        self.redis.stop()

    # --- faults' tools ---------------------------------------------------------------------

    @contextlib.contextmanager
    def holding(self, worker: str, timeout_s: float = 20.0) -> Iterator[None]:
        """Inside: one of ``worker``'s model instances is known to be mid-batch (it waits in
        ``execute`` on a hold file); leaving releases it."""
        hold = self.record_dir / f"hold-{worker}"
        for marker in self.record_dir.glob(f"holding-{worker}-*"):
            marker.unlink()
        hold.touch()
        try:
            wait_until(
                lambda: any(self.record_dir.glob(f"holding-{worker}-*")),
                timeout_s,
                every=0.005,
                failure=f"{worker} took no batch within {timeout_s} s",
            )
            yield
        finally:
            hold.unlink(missing_ok=True)

    def proxy_command(self, line: str) -> str:
        assert self.proxy is not None and self.proxy.stdin and self.proxy.stdout
        self.proxy.stdin.write(line + "\n")
        self.proxy.stdin.flush()
        return self.proxy.stdout.readline().strip()

    # --- health ----------------------------------------------------------------------------

    def wait_serving(self, timeout_s: float) -> None:
        """An inference through Envoy and through each gateway answers correctly."""
        last = ""

        def serving() -> bool:
            nonlocal last
            self.raise_if_dead()
            try:
                return all(
                    probe(base, 999_000_000 + i)
                    for i, base in enumerate([self.url, *map(self.gateway_url, GATEWAYS)])
                )
            except httpx.HTTPError as exc:
                last = repr(exc)
                return False

        wait_until(
            serving,
            timeout_s,
            every=0.2,
            failure=lambda: f"mesh not serving within {timeout_s} s ({last}): {self.logs()}",
        )

    def process_tree(self) -> dict[str, psutil.Process]:
        """Every process of the mesh by a stable label (model processes under their worker)."""
        found: dict[str, psutil.Process] = {}
        owners: dict[str, int | None] = {name: self.pid(name) for name in self.processes}
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
