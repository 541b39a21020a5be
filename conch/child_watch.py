"""`conch up`'s watch loop sleeps until something happens to what it runs, not on a short tick.

A child that exits sends SIGCHLD, and SIGINT/SIGTERM ask to stop: each has a Python handler, so
the interpreter writes the signal's number to the wake-up fd (``signal.set_wakeup_fd``), and a
``select`` on it returns at once. The timeout is only a safety net (and the pace of start-up
probes and back-off restarts, which the caller passes as a short timeout while they last).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
from types import FrameType


def _noted(signum: int, frame: FrameType | None) -> None:
    """SIGCHLD's handler: nothing to do, the wake-up fd carries the news. (Not SIG_IGN, which
    would reap the children before ``Popen.poll`` sees their exit codes.)"""


class ChildWatch:
    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._previous_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._previous_handler = signal.signal(signal.SIGCHLD, _noted)

    def wait(self, timeout_s: float) -> None:
        """Until a signal arrives (a child exited, a stop was asked) or ``timeout_s`` passes."""
        with contextlib.suppress(InterruptedError):
            select.select([self._read], [], [], timeout_s)
        with contextlib.suppress(BlockingIOError):
            while os.read(self._read, 512):
                pass

    def close(self) -> None:
        signal.signal(signal.SIGCHLD, self._previous_handler)
        signal.set_wakeup_fd(self._previous_fd)
        os.close(self._read)
        os.close(self._write)
