"""Who is told that a batch finished: the scheduler, for the batches it dispatched, and no one
for a request admitted direct.

The scheduler counts the batches it dispatched against its in-flight limit and hears each one's
end on the version's batch-done channel. A direct request (``shared.wire.batch_entry``) was never
counted there; announcing it only woke the scheduler once per request at c=1 (78 us of its CPU
per request, ``docs/performance.md``).
"""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from shared.fleet import streams
from shared.wire import keys
from workers.batches.batch_outcome import Outcome

MODEL, VERSION, CONSUMER = "notice_model", 1, "worker-test"


async def _finish_one(r: aioredis.Redis, direct_level: int | None) -> list[bytes]:
    """Add an entry, deliver it to ``CONSUMER``, ack it through an Outcome, and return what the
    batch-done channel carried meanwhile."""
    stream = keys.batch_stream(MODEL, VERSION)
    await streams.ensure_group(r, stream, keys.WORKER_GROUP)
    entry_id = await r.xadd(stream, {b"d": b"x"})
    await r.xreadgroup(keys.WORKER_GROUP, CONSUMER, {stream: ">"}, count=1)
    pubsub = r.pubsub()
    await pubsub.subscribe(keys.batch_done_channel(MODEL, VERSION))
    await pubsub.get_message(timeout=1.0)  # the subscription's confirmation
    outcome = Outcome(
        entry=streams.Entry(stream.encode(), entry_id, {}),
        model=MODEL,
        version=VERSION,
        worker=CONSUMER,
        replies=[],
        stats={"execution_count": 1},
        now_ms=0.0,
        requests=[],
        unrun=0,
        ran=True,
        direct_level=direct_level,
    )
    async with r.pipeline(transaction=False) as pipe:
        outcome.queue(pipe)
        assert (await pipe.execute())[-1] == 1, "the ack was refused"
    heard = []
    deadline = asyncio.get_running_loop().time() + 0.5
    while asyncio.get_running_loop().time() < deadline:
        message = await pubsub.get_message(timeout=0.1)
        if message is not None and message["type"] == "message":
            heard.append(message["channel"])
    await pubsub.aclose()
    return heard


async def test_a_scheduler_batch_is_announced_to_the_scheduler(aredis: aioredis.Redis) -> None:
    heard = await _finish_one(aredis, direct_level=None)
    assert heard == [keys.batch_done_channel(MODEL, VERSION).encode()]


async def test_a_direct_request_is_acked_without_waking_the_scheduler(
    aredis: aioredis.Redis,
) -> None:
    heard = await _finish_one(aredis, direct_level=1)
    assert heard == []
    assert await aredis.xlen(keys.batch_stream(MODEL, VERSION)) == 0
