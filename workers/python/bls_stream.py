"""The responses of one decoupled BLS call (``exec(decoupled=True)``), as the called model sends
them.

The call's frames come back on the model process's reply stream like a gateway's streamed
request (``shared.fleet.reply_stream``: in ``seq`` order, duplicates dropped). Each response is
asked for from the model's thread (``next_sync``) or its event loop (``next``) and read on the BLS
client's loop. The stream ends with the called model's final frame (a flags-only final comes as
an empty response, as in Triton), an error (as the response's ``error()``), or the call's
deadline. A stream left before its end (the iterator closed or dropped) cancels the call, so
that the called model stops.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import Future

import redis.asyncio as aioredis

from shared.fleet.cancel_marks import mark_cancelled
from shared.fleet.replies import ReplyRouter
from shared.fleet.reply_stream import ReplyStream
from shared.wire.envelope import Reply
from shared.wire.errors import ErrorCode

log = logging.getLogger(__name__)


class BlsStream:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        redis: aioredis.Redis,
        replies: ReplyRouter,
        model: str,
        request_id: str,
    ):
        self.loop = loop
        self._redis = redis
        self._replies = replies
        self.model = model
        self.request_id = request_id
        # The call's submission: an error reply, or an empty one once queued (set by the client).
        self.opened: Future[Reply] | None = None
        self._frames: ReplyStream | None = None
        self._deadline_ms = 0
        self.ended = False

    def begin(self, deadline_ms: int) -> None:
        """On the client's loop, before the call is queued: expect its frames."""
        self._frames = self._replies.expect_stream(self.request_id)
        self._deadline_ms = deadline_ms

    async def next(self) -> Reply:
        """The next response (on the client's loop); the last one says ``final``."""
        assert self.opened is not None, "the client sets it when it opens the stream"
        opened = await asyncio.wrap_future(self.opened)
        if opened.error_code:
            self._end()
            return opened
        assert self._frames is not None
        remaining_s = max(self._deadline_ms - time.time() * 1000, 1) / 1000
        try:
            async with asyncio.timeout(remaining_s + 0.05):
                frame = await self._frames.next()
        except TimeoutError:
            await self.cancel()
            return Reply(
                id=self.request_id,
                model=self.model,
                version=opened.version,
                error_code=ErrorCode.DEADLINE_EXCEEDED.value,
                error=f"Request timeout expired: model '{self.model}' did not finish its "
                "responses in time",
            )
        if frame.final or frame.error_code:
            self._end()
        return frame

    def next_sync(self) -> Reply:
        return asyncio.run_coroutine_threadsafe(self.next(), self.loop).result()

    async def cancel(self) -> None:
        """Left before its end: the called model is told (``is_cancelled()``) and stops."""
        if self.ended:
            return
        self._end()
        try:
            await mark_cancelled(self._redis, self.model, self.request_id, self._deadline_ms)
        except Exception:
            log.warning("could not cancel a BLS call", extra={"request": self.request_id})

    def close(self) -> None:
        """From any thread: the responses are no longer read."""
        if not self.ended:
            asyncio.run_coroutine_threadsafe(self.cancel(), self.loop)

    def _end(self) -> None:
        self.ended = True
        self._replies.forget_stream(self.request_id)
