"""The doorbell reader of one holding instance: the admission script (and adoption) append a
sequence's name and step to the instance's bell stream; this task reads them as they come, on a
connection of its own, and hands each to the holder loop. Bells are hints: a lost one costs the
holder a reconcile interval, never a step, because the queues in Redis are the truth."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import cast

import redis.asyncio as aioredis

from shared.runtime import redis_conn

log = logging.getLogger(__name__)


async def read_bells(
    redis_url: str, stream: str, ring: Callable[[str, int, bytes | None], None]
) -> None:
    """Call ``ring(sequence, step, step payload or None)`` for every bell (step 0: look at the
    sequence anyway)."""
    client: aioredis.Redis = redis_conn.dedicated(redis_url, name="conch-worker-bells")
    last = b"0"
    try:
        while True:
            try:
                # RESP2, decode_responses=False: bytes throughout (redis-py also allows str).
                reply = cast(
                    list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes]]]]] | None,
                    await client.xread({stream: last}, count=1000, block=1000),
                )
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("doorbell read failed; retrying", extra={"stream": stream})
                await asyncio.sleep(0.2)
                continue
            for _stream, entries in reply or []:
                for entry_id, fields in entries:
                    last = entry_id
                    ring(fields[b"s"].decode(), int(fields.get(b"n", 0)), fields.get(b"d"))
    finally:
        await client.aclose()
