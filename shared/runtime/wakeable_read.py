"""A blocking read with a long timeout that another task can end at once.

An idle loop that blocks on ``XREADGROUP ... BLOCK`` wakes its process (and Redis) once per
timeout; a short timeout was how such loops noticed anything besides new entries (new streams
to read, a batch handed back, a stop). Here the timeout is long and whoever has news calls
``wake()``: ``CLIENT UNBLOCK`` on the reading connection ends the read as a timeout would. A
wake that reaches Redis before the read does is repeated until the read has seen it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import redis.asyncio as aioredis

log = logging.getLogger(__name__)

T = TypeVar("T")

# A read blocks this long when no one wakes it (the reading client's socket timeout must exceed
# it: ``redis_conn.dedicated(..., block_ms=READ_BLOCK_MS)``).
READ_BLOCK_MS = 5_000
_RETRY_S = 0.02


class WakeableRead:
    """``reader``: the dedicated single-connection client that blocks; ``waker``: any other."""

    def __init__(self, reader: aioredis.Redis, waker: aioredis.Redis, fallback_block_ms: int):
        # On a cluster the reading connection is one of many: no wake, the short block stays.
        self.enabled = not isinstance(reader, aioredis.RedisCluster)
        self.block_ms = READ_BLOCK_MS if self.enabled else fallback_block_ms
        self._reader = reader
        self._waker = waker
        self._client_id: int | None = None
        self._generation = 0  # bumped by every wake
        self._reading: int | None = None  # the generation the read in flight started at
        self._waking: asyncio.Task[None] | None = None

    async def read(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run ``call`` (a blocking command on the reader) so that ``wake`` can end it."""
        if not self.enabled:
            return await call()
        if self._client_id is None:
            self._client_id = int(await self._reader.client_id())
        self._reading = self._generation
        try:
            return await call()
        except BaseException:
            self._client_id = None  # the connection may be a new one next time
            raise
        finally:
            self._reading = None

    def wake(self) -> None:
        """End the read in flight (if any) now; a read that starts later is not affected."""
        self._generation += 1
        if (
            not self.enabled
            or self._reading is None
            or (self._waking is not None and not self._waking.done())
        ):
            return
        self._waking = asyncio.get_running_loop().create_task(self._unblock())

    async def _unblock(self) -> None:
        while self._reading is not None and self._reading < self._generation:
            client_id = self._client_id
            if client_id is None:
                return
            try:
                await self._waker.execute_command("CLIENT UNBLOCK", client_id)
            except Exception as exc:  # the read's own timeout still ends it
                log.debug("could not wake a blocking read", extra={"error": str(exc)})
                return
            await asyncio.sleep(_RETRY_S)
