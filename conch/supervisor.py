"""Start, watch and stop a set of service processes: `conch up`'s process manager.

Each service runs in its own session so that Ctrl-C reaches only the supervisor, which then
stops the services one at a time in reverse order (SIGTERM, then SIGKILL after a grace period):
the gateways, started last, drain their in-flight requests while the scheduler and workers that
answer them still run. Each service's output passes through the supervisor (to the same stream),
which keeps the first error line of each start.

A service has *served* once its probe URL answered 200. One that exits before that failed to
start: it is started again after a back-off (0.5 s, doubling, at most 10 s), and after
``start_attempts`` such failures in a row, or at once when it exits with ``EXIT_FINAL`` (a port
in use, an invalid setting), :meth:`Supervisor.check` raises :class:`StartupFailed` with the
service's first error line, and ``conch up`` stops. A service that dies after it served is
restarted, with the same back-off if it keeps dying soon after its start.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass, field

from conch import http_wait
from conch.service_output import FirstError, pump
from shared.runtime.exits import EXIT_FINAL

log = logging.getLogger("conch.up")

QUICK_DEATH_S = 10.0


@dataclass
class ServiceSpec:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    # A URL that answers 200 once the service serves (None: it serves once it runs).
    probe: str | None = None
    # The TLS context of an https:// probe (conch.http_wait.tls_context).
    probe_tls: ssl.SSLContext | None = None


class StartupFailed(Exception):
    """A service could not start, and starting it again will not help."""

    def __init__(self, service: str, attempts: int, exit_code: int, first_error: str | None):
        self.service = service
        self.attempts = attempts
        self.exit_code = exit_code
        self.first_error = first_error
        why = first_error or "no error line in its output; see the logs above"
        if exit_code == EXIT_FINAL:
            said = f"service {service} cannot start (exit code {exit_code})"
        else:
            said = (
                f"service {service} failed to start {attempts} times in a row "
                f"(exit code {exit_code})"
            )
        super().__init__(f"{said}: {why}")


@dataclass
class _Running:
    spec: ServiceSpec
    process: subprocess.Popen[bytes]
    started: float
    first_error: FirstError
    served: bool = False
    restarts: int = 0
    start_failures: int = 0
    next_start: float = 0.0


def backoff_s(failures: int) -> float:
    """Delay before the next start after ``failures`` quick deaths in a row (pure)."""
    return 0.0 if failures <= 0 else min(10.0, 0.5 * 2 ** (failures - 1))


class Supervisor:
    def __init__(self, grace_s: float = 15.0, start_attempts: int = 5):
        self._services: list[_Running] = []
        self._grace_s = grace_s
        self._attempts = max(1, start_attempts)

    def start(self, spec: ServiceSpec) -> subprocess.Popen[bytes]:
        process, first = self._spawn(spec)
        self._services.append(_Running(spec, process, time.monotonic(), first))
        log.info("service started", extra={"target": spec.name, "pid": process.pid})
        return process

    def _spawn(self, spec: ServiceSpec) -> tuple[subprocess.Popen[bytes], FirstError]:
        env = {**os.environ, **spec.env}
        process = subprocess.Popen(
            spec.argv,
            env=env,
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        first = FirstError()
        assert process.stdout is not None and process.stderr is not None
        pump(process.stdout, sys.stdout, first)
        pump(process.stderr, sys.stderr, first)
        return process, first

    def settling(self) -> bool:
        """A service still starting (probed until it answers) or waiting to be restarted: the
        watch loop keeps its short pace while one is."""
        return any(not r.served or r.next_start != 0.0 for r in self._services)

    def check(self) -> None:
        """Restart services that exited; raise :class:`StartupFailed` for one that cannot start."""
        now = time.monotonic()
        for running in self._services:
            code = running.process.poll()
            if code is None:
                if not running.served and running.next_start == 0.0:
                    running.served = _answers(running.spec.probe, running.spec.probe_tls)
                continue
            if running.next_start == 0.0:
                self._exited(running, code, now)
            if now >= running.next_start:
                running.process, running.first_error = self._spawn(running.spec)
                running.started = now
                running.served = False
                running.next_start = 0.0
                log.info(
                    "service restarted",
                    extra={"target": running.spec.name, "pid": running.process.pid},
                )

    def _exited(self, running: _Running, code: int, now: float) -> None:
        name = running.spec.name
        first = running.first_error.line
        if code == EXIT_FINAL:
            raise StartupFailed(name, 1, code, first)
        if running.served:
            running.start_failures = 0
        else:
            running.start_failures += 1
            if running.start_failures >= self._attempts:
                raise StartupFailed(name, running.start_failures, code, first)
        lived = now - running.started
        running.restarts = running.restarts + 1 if lived < QUICK_DEATH_S else 1
        delay = backoff_s(running.restarts)
        running.next_start = now + delay
        log.error(
            "service exited; restarting",
            extra={
                "target": name,
                "exit_code": code,
                "before_serving": not running.served,
                "start_failures": running.start_failures,
                "restart_in_s": delay,
                "pid": running.process.pid,
                "first_error": first,
            },
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


def _answers(url: str | None, context: ssl.SSLContext | None = None) -> bool:
    """Whether ``url`` answers 200 now (no URL: the service serves once it runs)."""
    return True if url is None else http_wait.answers(url, 0.5, context)
