"""Cancel a request's handling when its HTTP client disconnects: the gateway's one mechanism.

Every HTTP route that may wait on the mesh (``/infer`` in ``gateway.rest.fastpath``, the event
streams of ``gateway.rest.stream_routes``) reads its body first and then watches ASGI's ``receive``
for ``http.disconnect``, which the ASGI server sends when the connection goes: a watcher task
cancels the handling task, and the data plane then marks the request cancelled in Redis
(``gateway.core.cancellation``), so that it is never started, or stopped where it runs. ASGI is the
only interface used, so it holds for any ASGI server (gRPC has its own cancel).

The watcher starts only once a request has run for ``WATCH_AFTER_S``: a task per request (made,
run to its first wait, cancelled: two turns of the loop) cost the gateway a measurable share of
its CPU at c=64 when nearly every request is answered in tens of milliseconds, and what a
cancellation saves is work the mesh has not done yet. A client that left earlier is seen at once
when the watcher starts (the server's ``receive`` answers ``http.disconnect`` for a connection
already gone), so a request waiting in a queue is still taken out before it runs.

The wait before the watcher is ``gateway.core.coarse_timers.after_delay`` (one loop timer for all
of a process's requests, not one each; ``WATCH_AFTER_S`` is its delay).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

from gateway.core import coarse_timers

Receive = Callable[[], Awaitable[dict[str, Any]]]
# How long a request runs before its connection is watched (see the module's docstring).
WATCH_AFTER_S = coarse_timers.DELAY_S


class CancelOnDisconnect:
    """``async with CancelOnDisconnect(receive) as watch:`` once the request's body is read;
    afterwards ``watch.disconnected`` says whether the client left (the cancellation is then
    absorbed: nothing is left to answer)."""

    def __init__(self, receive: Receive):
        self._receive = receive
        self._task: asyncio.Task[Any] | None = None
        self._timer: coarse_timers.Pending | None = None
        self._watcher: asyncio.Task[None] | None = None
        self.disconnected = False

    async def __aenter__(self) -> CancelOnDisconnect:
        self._task = asyncio.current_task()
        self._timer = coarse_timers.after_delay(self._start_watching)
        return self

    def _start_watching(self) -> None:
        self._timer = None
        self._watcher = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            message = await self._receive()
            if message.get("type") == "http.disconnect":
                self.disconnected = True
                if self._task is not None:
                    self._task.cancel()
                return

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if self._timer is not None:
            self._timer.cancel()
        if self._watcher is not None:
            self._watcher.cancel()
        if kind is asyncio.CancelledError and self.disconnected and self._task is not None:
            self._task.uncancel()
            return True  # the client is gone: nothing to answer
        return False
