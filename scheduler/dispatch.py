"""Sending a batch: one transaction puts it on the batch stream and takes its requests off theirs.

The batch is added to the version's batch stream and its requests acked and deleted from the
request streams in one MULTI, so a request is either still queued or in exactly one batch. The
same transaction reads the batch stream's length: the backlog the workers have yet to take.
"""

from __future__ import annotations

import time
from collections import defaultdict

import redis.asyncio as aioredis

from scheduler.pending import Pending
from shared import envelope, keys, tracing
from shared.envelope import Batch
from shared.ids import new_id


def new_batch(model: str, version: int, chosen: list[Pending]) -> Batch:
    """The batch of the chosen requests, with each one's time in the queue so far."""
    now_ms = time.time() * 1000
    return Batch(
        batch_id=new_id(),
        model=model,
        version=version,
        formed_ms=int(now_ms),
        requests=[p.data for p in chosen],
        queue_ns=[max(0, int((now_ms - p.header.enqueued_ms) * 1e6)) for p in chosen],
    )


async def send(r: aioredis.Redis, batch_stream: str, batch: Batch, chosen: list[Pending]) -> int:
    """Send the batch (one MULTI); returns the batch stream's length after it."""
    by_stream: dict[bytes, list[bytes]] = defaultdict(list)
    for p in chosen:
        by_stream[p.stream].append(p.entry_id)
    async with r.pipeline(transaction=True) as pipe:
        pipe.xadd(batch_stream, {keys.FIELD_DATA: envelope.encode(batch)})
        ack_delete(pipe, by_stream)
        pipe.xlen(batch_stream)
        results = await pipe.execute()
    return int(results[-1])


def ack_delete(pipe: aioredis.client.Pipeline, by_stream: dict[bytes, list[bytes]]) -> None:
    """Take request entries off their streams: acked for the scheduler group, then deleted."""
    for stream, ids in by_stream.items():
        pipe.xack(stream, keys.SCHEDULER_GROUP, *ids)
        pipe.xdel(stream, *ids)


def trace_queued(model: str, version: int, chosen: list[Pending], queue_ns: list[int]) -> None:
    """One span per traced request: its time in the queue, ending now."""
    now_ns = time.time_ns()
    for p, ns in zip(chosen, queue_ns, strict=True):
        tracing.record(
            "conch.scheduler.queue",
            tracing.decode_trace(p.data),
            now_ns - ns,
            now_ns,
            {"model": model, "version": version, "priority": p.header.priority},
        )
