"""The frames of one streamed request, handed out in ``seq`` order.

Frames of one request come from one worker in order, but a batch redelivered after a crash, or
entries of several reply-stream reads, can bring one twice or out of order: a frame is held
until those before it arrived, and one already handed out is dropped. A frame with an error, or
one marked final, ends the stream. The gateway may also end it itself (``fail``): the worker
died mid-stream, the deadline passed.
"""

from __future__ import annotations

import asyncio
import time

from shared.wire.envelope import Reply


class ReplyStream:
    __slots__ = (
        "_held",
        "_next",
        "_queue",
        "ended",
        "frames",
        "last_frame",
        "last_reply",
        "request_id",
        "worker",
    )

    def __init__(self, request_id: str):
        self.request_id = request_id
        self._queue: asyncio.Queue[Reply] = asyncio.Queue()
        self._next = 0
        self._held: dict[int, Reply] = {}
        self.frames = 0  # handed on so far
        self.worker = ""  # the worker whose frames these are (from the first one)
        self.last_frame = time.monotonic()
        self.last_reply: Reply | None = None
        self.ended = False

    def offer(self, reply: Reply) -> bool:
        """Take one frame; False for a duplicate or a frame after the end."""
        if self.ended or reply.seq < self._next or reply.seq in self._held:
            return False
        self._held[reply.seq] = reply
        while (frame := self._held.pop(self._next, None)) is not None:
            self._next += 1
            self.frames += 1
            self.worker = frame.worker or self.worker
            self.last_frame = time.monotonic()
            self.last_reply = frame
            self._queue.put_nowait(frame)
            if frame.final or frame.error_code:
                self.ended = True
                self._held.clear()
                break
        return True

    def fail(self, reply: Reply) -> None:
        """End the stream with this error frame, whatever is still missing."""
        if not self.ended:
            self.ended = True
            self._held.clear()
            self._queue.put_nowait(reply)

    async def next(self) -> Reply:
        return await self._queue.get()
