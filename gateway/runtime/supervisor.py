"""The gateway service's own supervisor: bind the port once, run N processes on it, watch them.

The HTTP port is bound here, exclusively (``shared.runtime.listen``), and each process serves that
socket by inheriting it; a port that is taken stops the service at once with the holder's name.
A process that exits before it accepted connections has failed to start: it is started again
after a back-off (0.5 s, doubling, at most 10 s), and after ``start_attempts`` such failures in a
row the service stops every process and exits with ``EXIT_FINAL``, so a broken install prints a
few tracebacks rather than an endless stream. A process that dies after it served is restarted
(with the same back-off if it keeps dying soon after its start). SIGTERM or SIGINT stops them
all: each finishes its in-flight requests (uvicorn's graceful shutdown), then the service exits.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from gateway.runtime.status import STARTING, ProcessStatus
from shared.runtime.exits import EXIT_FINAL

log = logging.getLogger("gateway.supervisor")

# A process drains for its graceful shutdown (the deadline and a margin); then it is killed.
KILL_AFTER_GRACE_S = 10.0
QUICK_DEATH_S = 10.0  # a process that dies sooner than this after starting counts towards back-off
# How often the watch looks without a signal: while a process starts (its status file says when
# it serves) or waits out a back-off, and once every process serves.
STARTING_LOOK_S = 0.1
SETTLED_LOOK_S = 60.0  # once all serve: a child's exit (SIGCHLD) wakes it; this is a safety net


def backoff_s(failures: int) -> float:
    """Delay before the next start after ``failures`` failures in a row (pure)."""
    return 0.0 if failures <= 0 else min(10.0, 0.5 * 2 ** (failures - 1))


@dataclass
class _Slot:
    index: int
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    served: bool = False  # accepted connections at some point since this start
    failures: int = 0  # quick deaths in a row (back-off)
    next_start: float = 0.0


class GatewayProcesses:
    def __init__(
        self,
        fd: int,
        count: int,
        status: ProcessStatus,
        start_attempts: int,
        graceful_s: float = 35.0,
        stop_listening: Callable[[], None] = lambda: None,
    ):
        self._fd = fd
        # Stopping closes this process's copy of the listening socket, so that once the
        # processes have closed theirs a new caller is refused (and retried elsewhere by the
        # edge) instead of waiting in the backlog of a gateway that is going away.
        self._stop_listening = stop_listening
        self._grace_s = graceful_s + KILL_AFTER_GRACE_S
        self._status = status
        self._attempts = max(1, start_attempts)
        self._slots = [_Slot(i) for i in range(count)]
        self._start_failures = 0  # processes that failed before serving, in a row (any slot)
        self._stopping = False

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._request_stop)
        # A child's exit or a stop request wakes the watch at once (the signal's byte on a
        # pipe); otherwise it looks quickly only while a process is starting or due a restart,
        # and every few seconds once all serve: an idle gateway wakes no more than it must.
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        previous_fd = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        try:
            for slot in self._slots:
                self._start(slot)
            while not self._stopping:
                code = self._check()
                if code is not None:
                    return code
                settled = all(s.process is not None and s.served for s in self._slots)
                select.select([wake_r], [], [], SETTLED_LOOK_S if settled else STARTING_LOOK_S)
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 512)
            return 0
        finally:
            signal.set_wakeup_fd(previous_fd)
            os.close(wake_r)
            os.close(wake_w)
            self._stop_all()

    def _request_stop(self, signum: int, _frame: object) -> None:
        self._stopping = True

    def _argv(self, slot: _Slot) -> list[str]:
        return [
            sys.executable,
            "-m",
            "gateway.runtime.serve",
            "--fd",
            str(self._fd),
            "--index",
            str(slot.index),
            "--count",
            str(len(self._slots)),
            "--status",
            str(self._status.path),
            "--parent",
            str(os.getpid()),
        ]

    def _start(self, slot: _Slot) -> None:
        self._status.set(slot.index, STARTING)
        slot.process = subprocess.Popen(self._argv(slot), pass_fds=(self._fd,))
        slot.started = time.monotonic()
        slot.served = False
        slot.next_start = 0.0
        log.info("gateway process started", extra={"index": slot.index, "pid": slot.process.pid})

    def _check(self) -> int | None:
        """One turn of the watch loop; an exit code when the service must stop."""
        now = time.monotonic()
        for slot in self._slots:
            process = slot.process
            if process is None:
                if now >= slot.next_start:
                    self._start(slot)
                continue
            code = process.poll()
            if code is None:
                if not slot.served and self._status.get(slot.index) != STARTING:
                    slot.served = True
                    self._start_failures = 0
                continue
            final = self._exited(slot, process, code, now)
            if final is not None:
                return final
        return None

    def _exited(
        self, slot: _Slot, process: subprocess.Popen[bytes], code: int, now: float
    ) -> int | None:
        slot.served = slot.served or self._status.get(slot.index) != STARTING
        self._status.set(slot.index, STARTING)
        _forget_metrics(process.pid)
        slot.process = None
        if code == EXIT_FINAL:
            log.error(
                "gateway process cannot start; stopping the service",
                extra={"index": slot.index, "pid": process.pid, "exit_code": code},
            )
            return EXIT_FINAL
        if not slot.served:
            self._start_failures += 1
            if self._start_failures >= self._attempts:
                log.error(
                    "gateway processes failed to start; giving up",
                    extra={
                        "attempts": self._start_failures,
                        "exit_code": code,
                        "hint": "the first error above says why",
                    },
                )
                return EXIT_FINAL
        slot.failures = slot.failures + 1 if now - slot.started < QUICK_DEATH_S else 1
        delay = backoff_s(slot.failures)
        slot.next_start = now + delay
        log.error(
            "gateway process exited; starting it again",
            extra={
                "index": slot.index,
                "pid": process.pid,
                "exit_code": code,
                "before_serving": not slot.served,
                "start_failures": self._start_failures,
                "restart_in_s": delay,
            },
        )
        return None

    def _stop_all(self) -> None:
        self._stop_listening()
        running = [s.process for s in self._slots if s.process is not None]
        for process in running:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self._grace_s
        for process in running:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning(
                    "gateway process did not stop in time; killing", extra={"pid": process.pid}
                )
                process.kill()
                process.wait(timeout=5)
            _forget_metrics(process.pid)


def _forget_metrics(pid: int) -> None:
    """Prometheus multiprocess mode: a dead process's live gauges stop counting."""
    with contextlib.suppress(Exception):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)
