"""Timers that almost never fire, without a loop timer each: the two a request used to arm.

Every request answered on the fast path armed two timers of the event loop: its deadline
(``asyncio.timeout`` in ``DataPlane.infer``) and the start of its disconnect watcher after
``WATCH_AFTER_S`` (``gateway.rest.disconnect``). Nearly every request ends long before either
fires, so both were armed and cancelled: on uvloop 8-11 us for the ``asyncio.timeout`` and 2 us
for the ``call_later`` on the 2-core VM (2026-11-27, in isolation), about 6 % of the gateway's CPU
per request at ``mlp`` c=64 (docs/journal/2026-11-perf3-gateway.md).

``after_delay(fn)`` calls ``fn`` ``DELAY_S`` from now unless the handle is cancelled first. All
such calls have the same delay, so they are due in the order they were made: they wait in one
deque per loop, behind one loop timer armed for the oldest. Adding one is an append; cancelling
one marks it and drops the cancelled ones at the front. The loop timer fires at most once per
``DELAY_S`` while requests run (a spurious wake-up finds nothing due and re-arms for the new
oldest) and not at all when none do. Because anything added waits at most ``DELAY_S`` behind the
front, the deque holds at most a ``DELAY_S`` of requests.

``Deadline`` is a request's deadline on top of it: for its first ``DELAY_S`` only a deque entry;
a request still running then gets a real loop timer for the rest (``call_at``), so a deadline is
exact to the loop's clock as ``asyncio.timeout``'s is. A bound shorter than ``DELAY_S`` gets the
loop timer at once. On expiry it cancels the task and turns that cancellation into
``TimeoutError`` at its exit, as ``asyncio.Timeout`` does (the same ``uncancel`` test), so a
client's cancel stays a cancel.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Any

DELAY_S = 0.1


class Pending:
    """One ``after_delay`` call: ``cancel()`` before it is due and it never runs.

    A cancelled one lets go of its function at once: it may wait in the deque for up to
    ``DELAY_S`` more, and what the function holds (a request's task, its connection's cycle)
    must die by reference count when the request ends, as before. Held longer, a request's
    objects outlive the young collections the gateway's GC settings count on never running
    (``shared.runtime.gc_tuning``): measured, a c=64 window in three ran 2-3 times slower."""

    __slots__ = ("fn", "when")

    def __init__(self, when: float, fn: Callable[[], Any]):
        self.when = when
        self.fn: Callable[[], Any] | None = fn

    def cancel(self) -> None:
        self.fn = None


class _Queue:
    """One loop's pending calls, oldest first, behind one loop timer."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._items: deque[Pending] = deque()
        self._timer: asyncio.TimerHandle | None = None

    def add(self, fn: Callable[[], Any]) -> Pending:
        item = Pending(self._loop.time() + DELAY_S, fn)
        items = self._items
        items.append(item)
        if self._timer is None:
            self._timer = self._loop.call_at(item.when, self._run)
        elif len(items) > 64 and items[0].fn is None:
            self._drop_front()
        return item

    def _drop_front(self) -> None:
        items = self._items
        while items and items[0].fn is None:
            items.popleft()

    def _run(self) -> None:
        self._timer = None
        items, now = self._items, self._loop.time()
        due: list[Pending] = []
        while items and (items[0].fn is None or items[0].when <= now):
            item = items.popleft()
            if item.fn is not None:
                due.append(item)
        if items:
            self._timer = self._loop.call_at(items[0].when, self._run)
        for item in due:
            fn, item.fn = item.fn, None
            if fn is not None:  # one that ran may have cancelled a later one
                fn()


_queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Queue] = weakref.WeakKeyDictionary()
_last: tuple[asyncio.AbstractEventLoop | None, _Queue | None] = (None, None)


def _queue(loop: asyncio.AbstractEventLoop) -> _Queue:
    global _last
    last_loop, queue = _last
    if last_loop is loop and queue is not None:
        return queue
    queue = _queues.get(loop)
    if queue is None:
        queue = _queues[loop] = _Queue(loop)
    _last = (loop, queue)
    return queue


def after_delay(fn: Callable[[], Any]) -> Pending:
    """Call ``fn`` (in the running loop) ``DELAY_S`` from now, unless cancelled first."""
    return _queue(asyncio.get_running_loop()).add(fn)


class Deadline:
    """``with Deadline(seconds):`` around awaits in a task: ``TimeoutError`` once ``seconds``
    have passed, as ``async with asyncio.timeout(seconds)`` (see the module)."""

    __slots__ = ("_handle", "_loop", "_pending", "_task", "_when", "expired")

    def __init__(self, seconds: float):
        loop = self._loop = asyncio.get_running_loop()
        self._when = loop.time() + seconds
        self._handle: asyncio.TimerHandle | None = None
        self._pending: Pending | None = None
        self.expired = False
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("Deadline should be used inside a task")
        self._task = task
        if seconds <= DELAY_S:
            self._handle = loop.call_at(self._when, self._expire)
        else:
            self._pending = _queue(loop).add(self._arm)

    def __enter__(self) -> Deadline:
        return self

    def _arm(self) -> None:
        self._pending = None
        self._handle = self._loop.call_at(self._when, self._expire)

    def _expire(self) -> None:
        self._handle = None
        self.expired = True
        self._task.cancel()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._pending is not None:
            self._pending.fn = None
            self._pending = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self.expired and self._task.uncancel() == 0 and kind is asyncio.CancelledError:
            raise TimeoutError
