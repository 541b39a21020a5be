"""The admission script's direct branch (``shared.fleet.admission_script``,
``shared.fleet.direct_path``) on a real redis-server: a request goes to the batch stream as a batch
of one only while every request stream of the version and the batch stream are empty; it is then
decoded by the one reader every worker path uses (``shared.wire.batch_entry``) like a scheduler's
batch."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from shared import lua
from shared.fleet import readiness
from shared.fleet.admission_script import ADMITTED, DIRECT, NO_WORKER, admission_call
from shared.fleet.coalesced_script import CoalescedScript
from shared.fleet.fencing import queue_fenced_ack
from shared.runtime import clock
from shared.wire import batch_entry, envelope, keys
from shared.wire.envelope import Batch, InferRequest, RequestHeader, Tensor

MODEL, VERSION = "quick", 1
LEVELS = [1, 2, 3]
BATCHES = keys.batch_stream(MODEL, VERSION)


def stream(level: int) -> str:
    return keys.request_stream(MODEL, VERSION, level)


@pytest.fixture(params=["script", "coalesced"])
def admit(request: pytest.FixtureRequest, aredis: aioredis.Redis):
    """Admit request ``n`` at ``level``; ``direct``: whether the model may go direct."""
    script = (
        aredis.register_script(lua.ENQUEUE.source)
        if request.param == "script"
        else CoalescedScript(aredis, lua.ENQUEUE.source)
    )

    async def call(n: int, level: int = 2, direct: bool = True, max_queue: int = 0) -> int:
        now = clock.now_ms()
        header = RequestHeader(f"r{n}", "reply", now + 5_000, level, 1, "X:4", now - 3)
        data = InferRequest(
            f"r{n}", MODEL, VERSION, [Tensor("X", "FP32", [1, 4], bytes(16))], [], {}, "reply",
            now + 5_000, now - 3,
        )  # fmt: skip
        call = admission_call(
            model=MODEL,
            version=VERSION,
            priority=level,
            request_id=f"r{n}",
            now_ms=now,
            deadline_ms=now + 5_000,
            gone_ms=30_000,
            max_queue_size=max_queue,
            header=envelope.encode(header),
            data=envelope.encode(data),
            direct_levels=LEVELS if direct else (),
        )
        return int(await script(keys=call.keys, args=call.args))

    return call


@pytest.fixture(autouse=True)
async def worker(aredis: aioredis.Redis) -> None:
    await readiness.mark_ready(aredis, "worker-1", {(MODEL, VERSION): 1}, ttl_ms=60_000)


async def test_an_idle_version_takes_the_request_as_a_batch_of_one(
    aredis: aioredis.Redis, admit
) -> None:
    assert await admit(1) == DIRECT
    [(entry_id, fields)] = await aredis.xrange(BATCHES)
    assert set(fields) == {keys.FIELD_HEADER, keys.FIELD_DIRECT}
    assert [await aredis.xlen(stream(level)) for level in LEVELS] == [0, 0, 0]
    batch = batch_entry.decode(fields, entry_id, MODEL, VERSION)
    assert isinstance(batch, Batch)
    assert (batch.batch_id, batch.model, batch.version) == (entry_id.decode(), MODEL, VERSION)
    [raw] = batch.requests
    assert envelope.decode_request(raw).id == "r1"
    # queued from its admission (3 ms before "now" here) to the moment Redis added the entry
    assert 3_000_000 <= batch.queue_ns[0] < 1_000_000_000
    assert batch_entry.direct_priority(fields) == 2


async def test_a_batch_in_flight_queues_the_next_request(aredis: aioredis.Redis, admit) -> None:
    assert await admit(1) == DIRECT
    assert await admit(2) == ADMITTED
    assert await aredis.xlen(BATCHES) == 1
    assert await aredis.xlen(stream(2)) == 1


async def test_a_request_queued_at_any_level_queues_the_next(aredis: aioredis.Redis, admit) -> None:
    """Another level's queue counts too: a direct request would overtake it."""
    assert await admit(1, level=3, direct=False) == ADMITTED
    assert await admit(2, level=1) == ADMITTED
    assert await aredis.xlen(BATCHES) == 0
    assert (await aredis.xlen(stream(3)), await aredis.xlen(stream(1))) == (1, 1)


async def test_a_model_that_may_not_go_direct_is_queued(aredis: aioredis.Redis, admit) -> None:
    assert await admit(1, direct=False) == ADMITTED
    assert await aredis.xlen(BATCHES) == 0


async def test_a_direct_admission_sent_twice_adds_one_batch(aredis: aioredis.Redis, admit) -> None:
    assert await admit(1) == DIRECT
    await aredis.delete(BATCHES)  # the worker took and acked it: the version is idle again
    assert await admit(1) == ADMITTED  # the same request id: nothing added
    assert await aredis.xlen(BATCHES) == 0
    assert await aredis.xlen(stream(2)) == 0


async def test_no_live_worker_is_refused_before_the_direct_branch(
    aredis: aioredis.Redis, admit
) -> None:
    await aredis.delete(keys.ready(MODEL, VERSION))
    assert await admit(1) == NO_WORKER
    assert await aredis.xlen(BATCHES) == 0


async def test_a_scheduler_batch_decodes_as_before(aredis: aioredis.Redis) -> None:
    batch = Batch("b1", MODEL, VERSION, 5, [b"x"], [7])
    entry_id = await aredis.xadd(BATCHES, {keys.FIELD_DATA: envelope.encode(batch)})
    [(_, fields)] = await aredis.xrange(BATCHES)
    assert batch_entry.decode(fields, entry_id, MODEL, VERSION) == batch
    assert batch_entry.direct_priority(fields) is None


async def _execute_and_ack(aredis: aioredis.Redis, size: int) -> None:
    """A worker takes the batch stream's oldest entry and acks it as a batch of ``size``, with
    the fenced ack every worker sends (``shared.fleet.fencing``)."""
    await aredis.xgroup_create(BATCHES, keys.WORKER_GROUP, id="0", mkstream=True)
    [(_, [(entry_id, _)])] = await aredis.xreadgroup(
        keys.WORKER_GROUP, "worker-1", {BATCHES: ">"}, count=1
    )
    async with aredis.pipeline(transaction=False) as pipe:
        queue_fenced_ack(
            pipe, BATCHES, keys.stats(MODEL, VERSION), keys.WORKER_GROUP, "worker-1", entry_id,
            counters={"execution_count": 1, "inference_count": size}, last_inference_ms=1,
            batch_size=size,
        )  # fmt: skip
        assert await pipe.execute() == [1]
    await aredis.xgroup_destroy(BATCHES, keys.WORKER_GROUP)


async def test_after_a_larger_batch_an_idle_version_queues_until_a_batch_of_one(
    aredis: aioredis.Redis, admit
) -> None:
    """Closed-loop load empties every stream at each ack: the next wave's first request must not
    go alone ahead of the wave's batch. Direct again once the version runs batches of one."""
    await aredis.xadd(BATCHES, {keys.FIELD_DATA: b"a scheduler's batch of three"})
    await _execute_and_ack(aredis, 3)
    assert await aredis.xlen(BATCHES) == 0
    assert await admit(1) == ADMITTED  # everything idle, but the last batch held three
    assert await aredis.xlen(stream(2)) == 1
    await aredis.delete(stream(2))  # the scheduler dispatched it alone: a batch of one
    await aredis.xadd(BATCHES, {keys.FIELD_DATA: b"a scheduler's batch of one"})
    await _execute_and_ack(aredis, 1)
    assert await admit(2) == DIRECT
