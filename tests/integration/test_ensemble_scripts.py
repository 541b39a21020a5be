"""The ensemble scripts on a real redis-server: START creates a state once, STEP records a
step's outputs once and acks its entry only when the runner's view of the state was whole, FINISH
finishes each request once and adds the statistics of those it finished."""

from __future__ import annotations

import redis.asyncio as aioredis

from scheduler.ensemble import scripts
from shared.wire import keys

STATE = keys.ensemble_state("ens", 1, "r1")
OTHER = keys.ensemble_state("ens", 1, "r2")
STEPS = keys.ensemble_steps("ens", 1)
REQUESTS = keys.request_stream("ens", 1, 1)
STATS = keys.stats("ens", 1)


async def _run(r: aioredis.Redis, queue: object, *args: object) -> object:
    async with r.pipeline(transaction=False) as pipe:
        queue(pipe, *args)  # type: ignore[operator]
        (result,) = await pipe.execute()
    return result


async def _pending_entry(r: aioredis.Redis, stream: str) -> bytes:
    """An entry read by a scheduler and not acked yet."""
    await r.xgroup_create(stream, keys.SCHEDULER_GROUP, id="0", mkstream=True)
    entry_id = await r.xadd(stream, {"d": b"x"})
    await r.xreadgroup(keys.SCHEDULER_GROUP, "s1", {stream: ">"})
    return entry_id


async def _pending(r: aioredis.Redis, stream: str) -> int:
    return int((await r.xpending(stream, keys.SCHEDULER_GROUP))["pending"])


async def test_start_creates_a_state_with_its_children_once(aredis: aioredis.Redis) -> None:
    children = {"c:0": "r1.0"}
    assert await _run(aredis, scripts.queue_start, STATE, b"req", "s|1-0", 5000, children) == 1
    resumed = await _run(aredis, scripts.queue_start, STATE, b"other", "s|2-0", 5000, {})
    assert scripts.parse_state(resumed) == {b"req": b"req", b"entry": b"s|1-0", b"c:0": b"r1.0"}
    assert 0 < await aredis.pttl(STATE) <= 5000


async def test_step_records_once_and_acks_when_the_runner_knew_the_whole_state(
    aredis: aioredis.Redis,
) -> None:
    await _run(aredis, scripts.queue_start, STATE, b"req", "s|1-0", 5000, {"c:0": "r1.0"})
    entry = await _pending_entry(aredis, STEPS)
    # The runner knew req, entry, c:0; it adds d:0, t:X and the next step's child: 6 fields.
    record = scripts.StepRecord(STATE, 0, 6, [("X", b"one")], {"c:1": "r1.1"})
    assert await _run(aredis, scripts.queue_step, STEPS, entry, [record]) == [1]
    assert await _pending(aredis, STEPS) == 0
    assert await aredis.hget(STATE, "c:1") == b"r1.1"

    # A redelivered reply (another payload, as a retried step could give) records nothing.
    again = await _pending_entry_again(aredis)
    repeat = scripts.StepRecord(STATE, 0, 6, [("X", b"two")], {})
    assert await _run(aredis, scripts.queue_step, STEPS, again, [repeat]) == [1]
    assert await aredis.hget(STATE, "t:X") == b"one"


async def _pending_entry_again(r: aioredis.Redis) -> bytes:
    entry_id = await r.xadd(STEPS, {"d": b"y"})
    await r.xreadgroup(keys.SCHEDULER_GROUP, "s1", {STEPS: ">"})
    return entry_id


async def test_step_answers_the_state_and_leaves_the_entry_when_the_view_was_partial(
    aredis: aioredis.Redis,
) -> None:
    """Another scheduler recorded a parallel branch (d:1, t:Y): this runner's plan missed it."""
    await _run(aredis, scripts.queue_start, STATE, b"req", "s|1-0", 5000, {})
    await aredis.hset(STATE, mapping={"d:1": "1", "t:Y": b"y"})
    entry = await _pending_entry(aredis, STEPS)
    record = scripts.StepRecord(STATE, 0, 4, [("X", b"x")], {})
    (state,) = await _run(aredis, scripts.queue_step, STEPS, entry, [record])  # type: ignore[misc]
    assert scripts.parse_state(state) == {
        b"req": b"req",
        b"entry": b"s|1-0",
        b"d:1": b"1",
        b"t:Y": b"y",
        b"d:0": b"1",
        b"t:X": b"x",
    }
    assert await _pending(aredis, STEPS) == 1  # acked after the second plan's writes


async def test_step_of_a_finished_request_writes_nothing_and_acks(aredis: aioredis.Redis) -> None:
    entry = await _pending_entry(aredis, STEPS)
    record = scripts.StepRecord(STATE, 0, 0, [("X", b"x")], {"c:1": "r1.1"})
    assert await _run(aredis, scripts.queue_step, STEPS, entry, [record]) == [0]
    assert await aredis.exists(STATE) == 0
    assert await _pending(aredis, STEPS) == 0


async def test_finish_counts_each_request_once_and_sums_the_statistics(
    aredis: aioredis.Redis,
) -> None:
    await _run(aredis, scripts.queue_start, STATE, b"req", "x", 5000, {})
    await _run(aredis, scripts.queue_start, OTHER, b"req", "x", 5000, {})
    first = await _pending_entry(aredis, REQUESTS)
    second = await _pending_entry_of(aredis, REQUESTS)
    success = {"success_count": 1, "inference_count": 2, "execution_count": 1}
    failure = {"fail_count": 1}
    finished = [
        (STATE, REQUESTS, first.decode(), {**success, "compute_infer_ns": 3_000_000_000}),
        (OTHER, REQUESTS, second.decode(), failure),
        (STATE, REQUESTS, first.decode(), {**success, "compute_infer_ns": 5}),  # twice: once
    ]
    assert await _run(aredis, scripts.queue_finish, STATS, finished, 1234) == [1, 1, 0]
    stats = await aredis.hgetall(STATS)
    assert stats == {
        b"success_count": b"1",
        b"fail_count": b"1",
        b"inference_count": b"2",
        b"execution_count": b"1",
        b"compute_infer_ns": b"3000000000",
        b"last_inference": b"1234",
    }
    assert await aredis.exists(STATE, OTHER) == 0
    assert await _pending(aredis, REQUESTS) == 0
    assert await aredis.xlen(REQUESTS) == 0


async def _pending_entry_of(r: aioredis.Redis, stream: str) -> bytes:
    entry_id = await r.xadd(stream, {"d": b"z"})
    await r.xreadgroup(keys.SCHEDULER_GROUP, "s1", {stream: ">"})
    return entry_id
