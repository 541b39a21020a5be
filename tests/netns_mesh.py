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
from tests.netns_lab import Lab

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
PARTS = ["redis", "edge", "gw", "sched", "w1", "w2", "client"]
REDIS_PORT, GATEWAY_PORT, EDGE_PORT = 6379, 8000, 8080


@dataclass
class NetMesh:
    repository: Path
    log_dir: Path
    workers: tuple[str, ...] = ("w1",)
    backend: str = "onnxruntime"
    worker_env: dict[str, str] = field(default_factory=dict)
    lab: Lab = field(default_factory=lambda: Lab(list(PARTS)))

    @property
    def redis_url(self) -> str:
        return f"redis://{self.lab.addresses['redis']}:{REDIS_PORT}/0"

    @property
    def url(self) -> str:
        return f"http://{self.lab.addresses['edge']}:{EDGE_PORT}"

    @property
    def gateway_url(self) -> str:
        return f"http://{self.lab.addresses['gw']}:{GATEWAY_PORT}"

    def _env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
            "CONCH_REDIS_URL": self.redis_url,
            "CONCH_LOG_FORMAT": "text",
            "CONCH_LOG_LEVEL": "WARNING",
            **extra,
        }

    def _proxy(self, part: str, port: int) -> None:
        listen = f"{self.lab.addresses[part]}:{port}"
        argv = [PY, "-m", "tests.tcp_proxy", listen, f"127.0.0.1:{port}"]
        argv += ["--delay-file", str(self.delay_file)]
        self.lab.spawn(part, argv, self._env(), self.log_dir / f"proxy-{part}.log")

    @property
    def delay_file(self) -> Path:
        return self.log_dir / "delay_ms"

    def set_delay(self, ms: float) -> None:
        self.delay_file.write_text(str(ms))
        time.sleep(0.5)  # the forwarders re-read it every 100 ms

    def start(self) -> NetMesh:
        self.delay_file.write_text("0")
        self.lab.up()
        lab, logs = self.lab, self.log_dir
        redis_argv = [
            find_binary(), "--port", str(REDIS_PORT), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--protected-mode", "no", "--dir", str(logs),
        ]  # fmt: skip
        lab.spawn("redis", redis_argv, self._env(), logs / "redis.log")
        self._proxy("redis", REDIS_PORT)
        plan = plan_edge(self.redis_url, EDGE_PORT, host="127.0.0.1", workdir=logs / "edge")
        lab.spawn(
            "edge", plan.controlplane.argv, self._env(**plan.controlplane.env), logs / "cp.log"
        )
        lab.spawn("edge", plan.envoy.argv, self._env(), logs / "envoy.log")
        self._proxy("edge", EDGE_PORT)
        gateway_env = self._env(
            CONCH_GATEWAY_HOST="127.0.0.1",
            CONCH_GATEWAY_HTTP_PORT=str(GATEWAY_PORT),
            CONCH_GATEWAY_ADVERTISE_HOST=lab.addresses["gw"],
            CONCH_GATEWAY_PROCESSES="2",
        )
        lab.spawn("gw", [PY, "-m", "gateway"], gateway_env, logs / "gateway.log")
        self._proxy("gw", GATEWAY_PORT)
        lab.spawn("sched", [PY, "-m", "scheduler"], self._env(), logs / "scheduler.log")
        for part in self.workers:
            env = self._env(
                CONCH_WORKER_MODEL_REPOSITORY=str(self.repository),
                CONCH_WORKER_HEALTH_PORT="8020",
                CONCH_WORKER_HEALTH_HOST="0.0.0.0",
                **self.worker_env,
            )
            lab.spawn(
                part, [PY, "-m", "workers", "--backend", self.backend], env, logs / f"{part}.log"
            )
        return self

    def wait_ready(self, models: list[str], timeout_s: float = 120.0) -> None:
        """Ready through the edge, as a client in its own namespace sees it."""
        deadline = time.monotonic() + timeout_s
        paths = ["/v2/health/ready", *(f"/v2/models/{m}/ready" for m in models)]
        last = ""
        while time.monotonic() < deadline:
            try:
                codes = [self.curl(self.url + p, timeout=2) for p in paths]
                if all(code == "200" for code in codes):
                    return
                last = str(codes)
            except Exception as exc:
                last = str(exc)
            time.sleep(0.5)
        raise TimeoutError(f"the mesh across namespaces was not ready: {last}")

    def curl(self, url: str, timeout: float = 5) -> str:
        argv = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-m", str(timeout), url]
        return self.lab.run("client", argv, {"PATH": os.environ["PATH"]}, timeout + 5)

    def stop(self) -> None:
        self.lab.down()
