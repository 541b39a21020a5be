"""Wake-ups at a sub-millisecond instant, for a batcher's queue delay.

uvloop's timers have whole-millisecond resolution (libuv's): a timer due in 1.7 ms fires after
2.2, one due in 2.5 ms after 2.2 (measured, ``docs/journal/2026-11-perf3-ensembles.md``), so a
dynamic batcher that waits ``max_queue_delay_microseconds`` through them sends its batch up to
about a millisecond late, or early, on every batch it holds; at c=1 that is each step of an
ensemble. Triton's batcher waits on a condition variable to the microsecond.

One daemon thread per process keeps the due times in a heap and sleeps on a condition variable
(``pthread_cond_timedwait`` on CLOCK_MONOTONIC, the clock every event loop here reads) until the
first; when one is due it hands the callback to its loop with ``call_soon_threadsafe``. Measured
on the 2-core VM: 0.09-0.14 ms late at the median against uvloop's -0.3 to +0.7 ms. A timer
costs two thread switches, so it is for the rare wait that must be exact; periodic work stays on
the loop's own timers (``shared.runtime.ticks``).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import threading
import time
from collections.abc import Callable


class PreciseHandle:
    __slots__ = ("callback", "cancelled", "loop", "seq", "when")

    def __init__(
        self, when: float, seq: int, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]
    ) -> None:
        self.when = when
        self.seq = seq
        self.loop = loop
        self.callback = callback
        self.cancelled = False

    def __lt__(self, other: PreciseHandle) -> bool:
        return (self.when, self.seq) < (other.when, other.seq)

    def cancel(self) -> None:
        """Not called any more (left in the heap; the thread drops it when it surfaces). A
        handle that has fired reads as cancelled too."""
        self.cancelled = True


class PreciseTimer:
    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._heap: list[PreciseHandle] = []
        self._seq = 0
        self._thread: threading.Thread | None = None

    def call_at(
        self, when: float, callback: Callable[[], None], loop: asyncio.AbstractEventLoop
    ) -> PreciseHandle:
        """Call ``callback`` on ``loop`` at ``when`` (``time.monotonic()`` seconds)."""
        with self._condition:
            self._seq += 1
            handle = PreciseHandle(when, self._seq, loop, callback)
            heapq.heappush(self._heap, handle)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="conch-precise-timer", daemon=True
                )
                self._thread.start()
            elif self._heap[0] is handle:
                self._condition.notify()
        return handle

    def _run(self) -> None:
        heap = self._heap
        with self._condition:
            while True:
                now = time.monotonic()
                while heap and (heap[0].cancelled or heap[0].when <= now):
                    handle = heapq.heappop(heap)
                    if not handle.cancelled:
                        handle.cancelled = True  # done: a holder asking again gets a new one
                        _hand_over(handle)
                if len(heap) > 64 and sum(h.cancelled for h in heap) * 2 > len(heap):
                    heap[:] = [h for h in heap if not h.cancelled]
                    heapq.heapify(heap)
                self._condition.wait(heap[0].when - now if heap else None)


class Alarm:
    """One callback at one instant, set again as the instant moves: a handle is kept while the
    instant stays the same, so asking again costs nothing (a batcher asks at every arrival while
    its oldest request waits). A stale alarm only calls back early."""

    def __init__(self, callback: Callable[[], None], timer: PreciseTimer | None = None) -> None:
        self._callback = callback
        self._timer = timer
        self._handle: PreciseHandle | None = None

    def keep(self, when: float | None) -> None:
        """Call back at ``when`` (``time.monotonic()`` seconds); None: not at all."""
        handle = self._handle
        if handle is not None:
            if when is not None and handle.when == when and not handle.cancelled:
                return
            handle.cancel()
            self._handle = None
        if when is not None:
            timer = self._timer or TIMER
            self._handle = timer.call_at(when, self._callback, asyncio.get_running_loop())


def _hand_over(handle: PreciseHandle) -> None:
    # A RuntimeError: its loop closed, and nobody waits for it any more.
    with contextlib.suppress(RuntimeError):
        handle.loop.call_soon_threadsafe(handle.callback)


# One per process: the thread starts at the first wait that needs it.
TIMER = PreciseTimer()
