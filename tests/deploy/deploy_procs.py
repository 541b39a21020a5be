"""Real processes for the deploy tests: redis-server, the control plane, Envoy, gateways.

Every process is started on 127.0.0.1 with a free port, logs to a file in the test's temp dir,
and is stopped by its own PID.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conch.ports import free_port
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
STANDIN = Path(__file__).resolve().parent / "standin_gateway.py"
# The control plane's grace for a late gateway heartbeat in these tests (default 10 s).
GATEWAY_GRACE_S = 1.0

# The gateways the Envoy tests run against: the real one (``conch gateway``) and a stand-in
# that keeps only the registry contract, so a failure tells whether the edge or the gateway
# broke. Both read the same environment; adding a kind here adds it to every Envoy test.
GATEWAY_COMMANDS: dict[str, list[str]] = {
    "conch-gateway": [sys.executable, "-m", "gateway"],
    "standin": [sys.executable, str(STANDIN)],
}


class Proc:
    """One child process with its log file; stopped by PID, never by name."""

    def __init__(
        self, name: str, argv: Sequence[str], env: Mapping[str, str] | None, log_dir: Path
    ):
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = self.log_path.open("wb")
        self.popen = subprocess.Popen(
            list(argv),
            env={**os.environ, **(env or {})},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    def stop(self, timeout: float = 5.0) -> None:
        self.signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.popen.wait(5)
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


def start_gateway(
    name: str, redis_url: str, log_dir: Path, kind: str = "conch-gateway"
) -> tuple[Proc, int]:
    port = free_port()
    env = {
        "CONCH_REDIS_URL": redis_url,
        "CONCH_GATEWAY_HOST": "127.0.0.1",
        "CONCH_GATEWAY_HTTP_PORT": str(port),
        "CONCH_GATEWAY_ADVERTISE_HOST": "127.0.0.1",
        "CONCH_GATEWAY_PROCESSES": "1",
        # No worker runs here: strict readiness would keep these gateways out of Envoy's
        # healthy set, and these tests are about Envoy following gateways, not models.
        "CONCH_GATEWAY_STRICT_READINESS": "false",
    }
    return Proc(name, GATEWAY_COMMANDS[kind], env, log_dir), port


def _raise_if_exited(proc: Proc | None) -> None:
    if proc is not None and not proc.alive():
        raise RuntimeError(f"{proc.name} exited: {proc.log()}")


def wait_port(port: int, timeout: float, proc: Proc | None = None) -> None:
    def listening() -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return True
        _raise_if_exited(proc)
        return False

    wait_until(listening, timeout, failure=f"port {port} not open after {timeout}s")


def get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    """One GET on a fresh connection; (0, error) when it could not be sent or answered."""
    host_port, _, path = url.removeprefix("http://").partition("/")
    host, _, port = host_port.partition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request("GET", "/" + path)
        response = conn.getresponse()
        return response.status, response.read()
    except (OSError, http.client.HTTPException) as exc:
        return 0, str(exc).encode()
    finally:
        conn.close()


def wait_http(url: str, timeout: float, proc: Proc | None = None) -> None:
    def answers() -> bool:
        if get(url, 0.5)[0] == 200:
            return True
        _raise_if_exited(proc)
        return False

    wait_until(
        answers,
        timeout,
        every=0.05,
        failure=lambda: f"{url} not 200 after {timeout}s" + (f": {proc.log()}" if proc else ""),
    )


def cluster_hosts(admin_url: str, cluster: str) -> dict[int, bool]:
    """Envoy's view of a cluster: gateway port -> whether Envoy would route to it now."""
    status, body = get(f"{admin_url}/clusters?format=json")
    if status != 200:
        return {}
    hosts: dict[int, bool] = {}
    for entry in json.loads(body).get("cluster_statuses", []):
        if entry.get("name") != cluster:
            continue
        for host in entry.get("host_statuses", []):
            port = host["address"]["socket_address"]["port_value"]
            health = host.get("health_status", {})
            usable = health.get("eds_health_status") in (None, "HEALTHY") and not any(
                health.get(flag)
                for flag in ("failed_active_health_check", "failed_outlier_check",
                             "pending_active_hc", "pending_dynamic_removal")
            )  # fmt: skip
            hosts[int(port)] = usable
    return hosts


class Edge:
    """The running edge: the launch plan plus the control plane and Envoy processes."""

    def __init__(self, plan: Any, controlplane: Proc, envoy: Proc):
        self.plan = plan
        self.controlplane = controlplane
        self.envoy = envoy


@dataclass
class Traffic:
    """A few client threads sending GET /v2 through Envoy on keep-alive connections."""

    url: str
    threads: int = 3
    results: list[tuple[float, float, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _workers: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> Traffic:
        for _ in range(self.threads):
            worker = threading.Thread(target=self._run, daemon=True)
            worker.start()
            self._workers.append(worker)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for worker in self._workers:
            worker.join(10)

    def _run(self) -> None:
        host, port = self.url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=5)
        deadline = time.monotonic() + 60  # bounded even if the test forgets to stop it
        while not self._stop.is_set() and time.monotonic() < deadline:
            start = time.monotonic()
            try:
                conn.request("GET", "/v2")
                response = conn.getresponse()
                response.read()
                status = response.status
            except (OSError, http.client.HTTPException):
                status = 0
                conn.close()
                conn = http.client.HTTPConnection(host, int(port), timeout=5)
            self.results.append((start, time.monotonic(), status))
            time.sleep(0.003)
        conn.close()

    def failures(self) -> list[tuple[float, float, int]]:
        return [r for r in self.results if r[2] != 200]

    def in_flight_at(self, moment: float) -> int:
        return sum(1 for start, end, _ in self.results if start <= moment <= end)

    def started_between(self, first: float, last: float) -> int:
        return sum(1 for start, _, _ in self.results if first <= start <= last)
