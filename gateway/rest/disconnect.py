"""Cancel a request's handling when its HTTP client disconnects (ASGI routes).

Once the body is read, a watcher waits on the ASGI ``receive`` for ``http.disconnect`` and
cancels the handling task; the data plane then marks the request cancelled in Redis
(``gateway.core.cancellation``), so that it is never started, or stopped where it runs. The uvicorn
protocol hook (``gateway.rest.protocol``) does the same from ``connection_lost`` without a
watcher task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

Receive = Callable[[], Awaitable[dict[str, Any]]]


class CancelOnDisconnect:
    """``async with CancelOnDisconnect(receive) as watch:``; afterwards ``watch.disconnected``
    says whether the client left (the cancellation is then absorbed)."""

    def __init__(self, receive: Receive, deferred: bool = False):
        self._receive = receive
        self._deferred = deferred  # watch from ``start()`` on (once the body is read)
        self._task: asyncio.Task[Any] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self.disconnected = False

    async def __aenter__(self) -> CancelOnDisconnect:
        self._task = asyncio.current_task()
        if not self._deferred:
            await self.start()
        return self

    async def start(self) -> None:
        if self._watcher is None:
            self._watcher = asyncio.create_task(self._watch())

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
        if self._watcher is not None:
            self._watcher.cancel()
        if kind is asyncio.CancelledError and self.disconnected and self._task is not None:
            self._task.uncancel()
            return True  # the client is gone: nothing to answer
        return False
