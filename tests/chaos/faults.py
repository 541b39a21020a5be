"""The faults, each a function that breaks the running mesh and puts back what it broke.

A fault returns the moments it struck and ended and, where it cuts clients' connections (a
killed gateway), the window in which a request may legitimately be cut. Restarts stand for
``conch up``'s supervisor (or Kubernetes) bringing a dead process back.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from tests.chaos.chaos_mesh import ChaosMesh
from tests.waiting import eventually_sync

FREEZE_S = 5.0
RESTART_DELAY_S = 0.5  # conch up's supervisor restarts a dead service after 0.5 s
HALFOPEN_WAIT_S = 30.0  # the longest wait for a reply reader connection to cut


@dataclass(frozen=True)
class Struck:
    started: float
    ended: float
    # Requests in flight at this moment (a kill's signal) may be cut: their gateway died.
    cut_at: float | None = None
    note: str = ""


def worker_sigkill(mesh: ChaosMesh) -> Struck:
    """SIGKILL a worker (and its model processes) while it executes a batch."""
    with mesh.holding("worker-a"):
        started = time.monotonic()
        mesh.kill("worker-a")
    time.sleep(RESTART_DELAY_S)
    mesh.restart("worker-a")
    return Struck(started, time.monotonic(), note="killed mid-batch (held in execute)")


def scheduler_sigkill(mesh: ChaosMesh) -> Struck:
    started = time.monotonic()
    mesh.kill("scheduler")
    time.sleep(RESTART_DELAY_S)
    mesh.restart("scheduler")
    return Struck(started, time.monotonic())


def gateway_sigkill(mesh: ChaosMesh) -> Struck:
    # The cut is the moment the signal goes out, not when the test has seen the process reaped:
    # a frozen test process would otherwise place requests the kill cut before the "fault".
    started = time.monotonic()
    mesh.kill("gateway-a")
    time.sleep(RESTART_DELAY_S)
    mesh.restart("gateway-a")
    return Struck(started, time.monotonic(), cut_at=started)


def worker_sigstop(mesh: ChaosMesh) -> Struck:
    """SIGSTOP a worker (and its model processes) mid-batch for 5 s, then SIGCONT."""
    with mesh.holding("worker-a"):
        started = time.monotonic()
        mesh.signal("worker-a", signal.SIGSTOP)
    time.sleep(FREEZE_S)
    mesh.signal("worker-a", signal.SIGCONT)
    return Struck(started, time.monotonic(), note=f"frozen {FREEZE_S:.0f} s mid-batch")


def scheduler_sigstop(mesh: ChaosMesh) -> Struck:
    started = time.monotonic()
    mesh.signal("scheduler", signal.SIGSTOP)
    time.sleep(FREEZE_S)
    mesh.signal("scheduler", signal.SIGCONT)
    return Struck(started, time.monotonic(), note=f"frozen {FREEZE_S:.0f} s")


def redis_restart(mesh: ChaosMesh) -> Struck:
    """Redis killed (SIGKILL) and started again on its port from its append-only file."""
    started = time.monotonic()
    mesh.redis.kill()
    time.sleep(RESTART_DELAY_S)
    mesh.redis.start()
    return Struck(started, time.monotonic(), note="appendonly yes, appendfsync everysec")


def redis_stall(mesh: ChaosMesh) -> Struck:
    """Nothing forwarded to or from Redis for 5 s (connections stay open)."""
    started = time.monotonic()
    assert mesh.proxy_command(f"stall {FREEZE_S}") == "ok stall"
    time.sleep(FREEZE_S)
    return Struck(started, time.monotonic(), note=f"stalled {FREEZE_S:.0f} s")


def reply_reader_halfopen(mesh: ChaosMesh) -> Struck:
    """Every gateway's reply-reader connection goes half-open: open, silent, forever."""
    started = time.monotonic()
    # A reader cut by the last strike is replaced once its read times out (the block plus the
    # socket timeout, about 10 s): until then there is nothing new to cut, so wait for it.
    answer = eventually_sync(
        lambda: mesh.proxy_command("halfopen conch-gateway-replies"),
        lambda said: int(said.rsplit(" ", 1)[-1]) >= 1,
        HALFOPEN_WAIT_S,
        every=0.25,
    )
    cut = int(answer.rsplit(" ", 1)[-1])
    assert cut >= 1, f"no reply reader connection found to cut in {HALFOPEN_WAIT_S} s ({answer})"
    return Struck(started, time.monotonic(), note=f"{cut} reply reader connection(s) half-open")


FAULTS: dict[str, Callable[[ChaosMesh], Struck]] = {
    "worker-sigkill": worker_sigkill,
    "scheduler-sigkill": scheduler_sigkill,
    "gateway-sigkill": gateway_sigkill,
    "worker-sigstop-5s": worker_sigstop,
    "scheduler-sigstop-5s": scheduler_sigstop,
    "redis-stall-5s": redis_stall,
    "reply-reader-half-open": reply_reader_halfopen,
    "redis-restart-aof": redis_restart,
}
