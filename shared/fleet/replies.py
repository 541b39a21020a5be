"""One reply reader per gateway process: resolves the waiting request by its id.

Replies arrive on this process's own stream. Delivery upstream is at-least-once, so a reply for
a request that is no longer waiting (answered already, or timed out) is ignored.

A streamed request (``expect_stream``) gets its frames in ``seq`` order through a
:class:`shared.fleet.reply_stream.ReplyStream`, whatever order they arrive in; a frame seen before
(a redelivery) is dropped there.
"""

from __future__ import annotations

import asyncio
import logging
from typing import cast

import redis.asyncio as aioredis

from shared.fleet.reply_stream import ReplyStream
from shared.runtime import redis_conn
from shared.runtime.wakeable_read import READ_BLOCK_MS
from shared.wire import keys
from shared.wire.envelope import Reply, decode_replies

log = logging.getLogger(__name__)


class ReplyRouter:
    def __init__(self, redis_url: str, owner_id: str):
        self.stream = keys.reply_stream(owner_id)
        self._redis_url = redis_url
        self._pending: dict[str, asyncio.Future[Reply]] = {}
        self._streams: dict[str, ReplyStream] = {}
        # Set while a stream is open: its liveness watch sleeps, not polls, when none is.
        self.streams_open = asyncio.Event()
        self.duplicates = 0

    def expect(self, request_id: str) -> asyncio.Future[Reply]:
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        return future

    def forget(self, request_id: str) -> None:
        self._pending.pop(request_id, None)

    def expect_stream(self, request_id: str) -> ReplyStream:
        stream = ReplyStream(request_id)
        self._streams[request_id] = stream
        self.streams_open.set()
        return stream

    def forget_stream(self, request_id: str) -> None:
        self._streams.pop(request_id, None)
        if not self._streams:
            self.streams_open.clear()

    def streams(self) -> list[ReplyStream]:
        """The streams waiting for frames (for the watch on their workers' liveness)."""
        return list(self._streams.values())

    @property
    def in_flight(self) -> int:
        return len(self._pending) + len(self._streams)

    async def run(self) -> None:
        client: aioredis.Redis = redis_conn.dedicated(
            self._redis_url, name="conch-gateway-replies", block_ms=READ_BLOCK_MS
        )
        last_id = b"0-0"
        try:
            while True:
                try:
                    # RESP2 with decode_responses=False: bytes throughout (redis-py's
                    # annotations allow the str of a decoding client).
                    reply = cast(
                        list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes]]]]] | None,
                        await client.xread({self.stream: last_id}, count=512, block=READ_BLOCK_MS),
                    )
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("reply stream read failed; retrying")
                    await asyncio.sleep(0.2)
                    continue
                for _stream, messages in reply or []:
                    for entry_id, fields in messages:
                        last_id = entry_id
                        self._resolve(fields.get(keys.FIELD_DATA))
                if reply:
                    # The requests just resolved answer their clients first; the next read
                    # (a command to write, a system call that wakes Redis) waits one turn.
                    await asyncio.sleep(0)
        finally:
            try:
                await client.delete(self.stream)
            finally:
                await client.aclose()

    def _resolve(self, payload: bytes | None) -> None:
        if payload is None:
            return
        try:
            replies = decode_replies(payload)
        except Exception:
            log.exception("undecodable reply entry dropped")
            return
        for reply in replies:
            future = self._pending.pop(reply.id, None)
            if future is None and (stream := self._streams.get(reply.id)) is not None:
                if not stream.offer(reply):
                    self.duplicates += 1
                continue
            if future is None or future.done():
                self.duplicates += 1
                log.debug("reply for a request no longer waiting", extra={"request": reply.id})
                continue
            future.set_result(reply)
