"""Start, watch and stop a set of service processes: `conch up`'s process manager.

Each service runs in its own session so that Ctrl-C reaches only the supervisor, which then
stops the services one at a time in reverse order (SIGTERM, then SIGKILL after a grace period):
the gateways, started last, drain their in-flight requests while the scheduler and workers that
answer them still run. A service that
dies is restarted, with a back-off if it keeps dying, and every restart is logged.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

log = logging.getLogger("conch.up")


@dataclass
class ServiceSpec:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class _Running:
    spec: ServiceSpec
    process: subprocess.Popen[bytes]
    started: float
    restarts: int = 0
    next_start: float = 0.0


class Supervisor:
    def __init__(self, grace_s: float = 15.0):
        self._services: list[_Running] = []
        self._grace_s = grace_s

    def start(self, spec: ServiceSpec) -> subprocess.Popen[bytes]:
        process = self._spawn(spec)
        self._services.append(_Running(spec, process, time.monotonic()))
        log.info("service started", extra={"target": spec.name, "pid": process.pid})
        return process

    def _spawn(self, spec: ServiceSpec) -> subprocess.Popen[bytes]:
        env = {**os.environ, **spec.env}
        return subprocess.Popen(
            spec.argv, env=env, start_new_session=True, stdout=sys.stdout, stderr=sys.stderr
        )

    def check(self) -> None:
        """Restart services that exited; back off when one keeps dying soon after its start."""
        now = time.monotonic()
        for running in self._services:
            code = running.process.poll()
            if code is None:
                continue
            if running.next_start == 0.0:
                lived = now - running.started
                running.restarts = running.restarts + 1 if lived < 10 else 1
                delay = min(10.0, 0.5 * 2 ** (running.restarts - 1))
                running.next_start = now + delay
                log.error(
                    "service exited; restarting",
                    extra={
                        "target": running.spec.name,
                        "exit_code": code,
                        "restart_in_s": delay,
                        "pid": running.process.pid,
                    },
                )
            if now >= running.next_start:
                running.process = self._spawn(running.spec)
                running.started = now
                running.next_start = 0.0
                log.info(
                    "service restarted",
                    extra={"target": running.spec.name, "pid": running.process.pid},
                )

    def pids(self) -> dict[str, int]:
        return {r.spec.name: r.process.pid for r in self._services}

    def stop_all(self) -> None:
        for running in reversed(self._services):
            if running.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(running.process.pid, signal.SIGTERM)
            try:
                running.process.wait(timeout=self._grace_s)
            except subprocess.TimeoutExpired:
                log.warning(
                    "service did not stop in time; killing", extra={"target": running.spec.name}
                )
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(running.process.pid, signal.SIGKILL)
                running.process.wait(timeout=5)
            log.info("service stopped", extra={"target": running.spec.name})
