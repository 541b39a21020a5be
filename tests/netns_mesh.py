"""The mesh across hosts: Redis, the edge (control plane + Envoy), the gateways, the scheduler and
each worker in a network namespace of its own (``tests.netns_lab``), the client in another.

Every service binds loopback inside its namespace and is reached through a delay forwarder on
the namespace's address (``tests.tcp_proxy`` with a delay file): each one-way message between
two parts crosses one hop whose latency ``set_delay`` sets for the whole lab at once. (The
kernel's ``tc netem`` would do it per packet; this machine's kernel has no ``sch_netem``, so the
delay is applied per chunk in user space: same latency per hop, plus the forwarder's own cost,
which the 0 ms baseline includes too.)
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from conch.envoy_edge import plan_edge
from conch.private_redis import find_binary
from tests.mesh import Mesh
from tests.netns_lab import Lab
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
PARTS = ["redis", "edge", "gw", "sched", "w1", "w2", "client"]
REDIS_PORT, GATEWAY_PORT, EDGE_PORT = 6379, 8000, 8080


@dataclass
class NetMesh:
    """A ``tests.mesh.Mesh`` whose services run in the lab's parts (``host=``)."""

    repository: Path
    log_dir: Path
    workers: tuple[str, ...] = ("w1",)
    backend: str = "onnxruntime"
    worker_env: dict[str, str] = field(default_factory=dict)
    lab: Lab = field(default_factory=lambda: Lab(list(PARTS)))
    mesh: Mesh | None = None

    @property
    def redis_url(self) -> str:
        return f"redis://{self.lab.addresses['redis']}:{REDIS_PORT}/0"

    @property
    def url(self) -> str:
        return f"http://{self.lab.addresses['edge']}:{EDGE_PORT}"

    @property
    def gateway_url(self) -> str:
        return f"http://{self.lab.addresses['gw']}:{GATEWAY_PORT}"

    def _proxy(self, mesh: Mesh, part: str, port: int) -> None:
        listen = f"{self.lab.addresses[part]}:{port}"
        argv = [PY, "-m", "tests.tcp_proxy", listen, f"127.0.0.1:{port}"]
        argv += ["--delay-file", str(self.delay_file)]
        mesh.start_process(f"proxy-{part}", argv, host=part)

    @property
    def delay_file(self) -> Path:
        return self.log_dir / "delay_ms"

    def set_delay(self, ms: float) -> None:
        self.delay_file.write_text(str(ms))
        time.sleep(0.5)  # the forwarders re-read it every 100 ms

    def start(self) -> NetMesh:
        self.delay_file.write_text("0")
        self.lab.up()
        mesh = self.mesh = Mesh(
            self.redis_url,
            self.repository,
            http_port=GATEWAY_PORT,
            log_dir=self.log_dir,
            env_overrides={"PYTHONPATH": str(ROOT), "CONCH_LOG_LEVEL": "WARNING"},
            lab=self.lab,
        )
        redis_argv = [
            find_binary(), "--port", str(REDIS_PORT), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--protected-mode", "no", "--dir", str(self.log_dir),
        ]  # fmt: skip
        mesh.start_process("redis", redis_argv, host="redis")
        self._proxy(mesh, "redis", REDIS_PORT)
        plan = plan_edge(self.redis_url, EDGE_PORT, host="127.0.0.1", workdir=self.log_dir / "edge")
        mesh.start_edge(plan, host="edge")
        self._proxy(mesh, "edge", EDGE_PORT)
        mesh.start_gateway(
            processes=2, host="gw", CONCH_GATEWAY_ADVERTISE_HOST=self.lab.addresses["gw"]
        )
        self._proxy(mesh, "gw", GATEWAY_PORT)
        mesh.start_scheduler(host="sched")
        for part in self.workers:
            mesh.start_worker(
                part,
                self.backend,
                host=part,
                CONCH_WORKER_HEALTH_PORT="8020",
                CONCH_WORKER_HEALTH_HOST="0.0.0.0",
                **self.worker_env,
            )
        return self

    def wait_ready(self, models: list[str], timeout_s: float = 120.0) -> None:
        """Ready through the edge, as a client in its own namespace sees it."""
        paths = ["/v2/health/ready", *(f"/v2/models/{m}/ready" for m in models)]
        last = ""

        def ready() -> bool:
            nonlocal last
            try:
                codes = [self.curl(self.url + p, timeout=2) for p in paths]
            except Exception as exc:
                last = str(exc)
                return False
            last = str(codes)
            return all(code == "200" for code in codes)

        wait_until(
            ready,
            timeout_s,
            every=0.5,
            failure=lambda: f"the mesh across namespaces was not ready: {last}",
        )

    def curl(self, url: str, timeout: float = 5) -> str:
        argv = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-m", str(timeout), url]
        return self.lab.run("client", argv, {"PATH": os.environ["PATH"]}, timeout + 5)

    def stop(self) -> None:
        if self.mesh is not None:
            self.mesh.stop()  # the lab's processes, then the lab
        else:
            self.lab.down()
