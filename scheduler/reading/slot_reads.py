"""The intake's read on Redis Cluster: one XREADGROUP per hash slot, all blocking at once.

A multi-stream XREADGROUP must name streams of one slot there, and the request streams of
different models live in different slots (``shared.wire.keys``). Each slot's read runs as a task on
a pool of its own (a connection per read, never retried: ``redis_conn.blocking_pool``);
whichever answers first is
handed over and read again, the others keep waiting, so an idle model costs no latency to a busy
one. A read cancelled because its streams changed may have been answered meanwhile: the caller
then recovers this scheduler's own pending entries (``needs_recovery``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis
from redis.crc import key_slot

from shared.wire import keys


def by_slot(streams: list[bytes]) -> list[tuple[bytes, ...]]:
    """The streams grouped by hash slot, each group sorted (a stable identity per group)."""
    groups: dict[int, list[bytes]] = {}
    for stream in streams:
        groups.setdefault(key_slot(stream), []).append(stream)
    return [tuple(sorted(group)) for _, group in sorted(groups.items())]


class SlotReads:
    def __init__(self, client: aioredis.Redis, consumer: str, count: int, block_ms: int = 1000):
        self._client = client
        self._consumer = consumer
        self._count = count
        self._block_ms = block_ms
        self._reads: dict[tuple[bytes, ...], asyncio.Task[Any]] = {}
        self.needs_recovery = False

    async def read(self, streams: list[bytes]) -> list[Any]:
        """Entries of the first slot(s) to answer, in XREADGROUP's reply shape. A failed read
        raises (after the other finished ones were collected): the caller recovers."""
        wanted = set(by_slot(streams))
        for group in [g for g in self._reads if g not in wanted]:
            self._reads.pop(group).cancel()
            self.needs_recovery = True
        for group in wanted - self._reads.keys():
            self._reads[group] = asyncio.create_task(self._read(group))
        done, _ = await asyncio.wait(self._reads.values(), return_when=asyncio.FIRST_COMPLETED)
        reply: list[Any] = []
        failure: BaseException | None = None
        for group, task in list(self._reads.items()):
            if task not in done:
                continue
            del self._reads[group]
            if task.exception() is not None:
                failure = failure or task.exception()
            else:
                reply.extend(task.result() or [])
        if failure is not None:
            raise failure
        return reply

    async def _read(self, group: tuple[bytes, ...]) -> Any:
        return await self._client.xreadgroup(
            keys.SCHEDULER_GROUP,
            self._consumer,
            {stream: b">" for stream in group},
            count=self._count,
            block=self._block_ms,
        )

    async def close(self) -> None:
        for task in self._reads.values():
            task.cancel()
        await asyncio.gather(*self._reads.values(), return_exceptions=True)
        self._reads.clear()
        await self._client.aclose()
