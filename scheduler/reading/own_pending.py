"""Recovering this scheduler's own pending entries after a failed step or a lost read.

An entry is this scheduler's once its XREADGROUP delivered it, even when the reply never arrived
(the connection dropped or timed out after Redis sent it): such an entry stays pending under this
scheduler, which no one else may claim while it is alive, and which it would never read again.
So after any failed read, step or write, the service lists its own pending entries (XPENDING:
ids only, without counting another delivery), reads back those its queues do not hold, and
queues them again; entries deleted while pending (already dispatched or answered) are acked.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import redis.asyncio as aioredis

from shared.fleet import streams
from shared.wire import keys

log = logging.getLogger(__name__)


async def recover(
    r: aioredis.Redis,
    request_streams: Iterable[bytes],
    consumer: str,
    holds: Callable[[bytes, bytes], bool],
) -> list[streams.Entry]:
    """The entries pending for ``consumer`` that no queue holds, read back from their streams."""
    found: list[streams.Entry] = []
    for stream in request_streams:
        pending = await streams.own_pending(r, stream, keys.SCHEDULER_GROUP, consumer)
        lost = [entry_id for entry_id, _ in pending if not holds(stream, entry_id)]
        if not lost:
            continue
        async with r.pipeline(transaction=False) as pipe:
            for entry_id in lost:
                pipe.xrange(stream, entry_id, entry_id)
            rows = await pipe.execute()
        deleted: list[bytes] = []
        for entry_id, row in zip(lost, rows, strict=True):
            if row and row[0][1]:
                found.append(streams.Entry(stream, entry_id, row[0][1]))
            else:
                deleted.append(entry_id)
        if deleted:
            await r.xack(stream, keys.SCHEDULER_GROUP, *deleted)
        log.warning(
            "recovered this scheduler's own pending entries",
            extra={"stream": stream.decode(), "requeued": len(lost) - len(deleted)},
        )
    return found
