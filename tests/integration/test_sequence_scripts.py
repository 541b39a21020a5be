"""The sequence scripts on a real redis-server: the gateway's admission (bind, queue in arrival
order, Triton's refusals, idle release, adoption of a dead holder, duplicate calls) and the
holder's fenced commit, idle release, backlog and adoption.

Time is the scripts' ``NOW`` argument, so idleness and death are reached by passing a later
clock, not by sleeping.
"""

from __future__ import annotations

import time

import pytest
import redis.asyncio as aioredis

from gateway.core.sequence_admission import SequenceAdmission
from shared.model_config import parse_pbtxt
from shared.model_config.sequences import sequence_spec
from shared.wire import keys
from shared.wire.envelope import InferRequest, Reply, Tensor
from shared.wire.errors import ConchError
from shared.wire.sequence_params import SequenceParams
from workers.sequence.store import (
    ALREADY,
    COMMITTED,
    NOT_HOLDER,
    OUT_OF_ORDER,
    RELEASED,
    SequenceStore,
    StepCommit,
    parse_head,
)

MODEL, VERSION = "acc", 1
CONFIG = parse_pbtxt(
    """name: "acc"
platform: "onnxruntime_onnx"
max_batch_size: 2
sequence_batching {
  max_sequence_idle_microseconds: 1000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] }
  ]
  state [ { input_name: "S" output_name: "S_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
)
SPEC = sequence_spec(CONFIG)
IDLE_MS = 1000
DEAD_AFTER_MS = 5000
READY = keys.ready(MODEL, VERSION)


def now_ms() -> int:
    return int(time.time() * 1000)


async def live(r: aioredis.Redis, worker: str, slots: int, until_ms: int | None = None) -> str:
    """A worker whose readiness lasts until ``until_ms``, with one instance of ``slots``."""
    await r.zadd(READY, {worker: until_ms if until_ms is not None else now_ms() + 60_000})
    instance = f"{worker}#0"
    await r.hset(keys.sequence_slots(MODEL, VERSION), instance, slots)
    return instance


def request(rid: str, value: int, now: int) -> InferRequest:
    return InferRequest(
        id=rid,
        model=MODEL,
        version=VERSION,
        inputs=[Tensor("INPUT", "INT32", [1, 1], value.to_bytes(4, "little"))],
        outputs=[],
        parameters={},
        reply_to=keys.reply_stream("gw"),
        deadline_ms=now + 10_000,
        enqueued_ms=now,
    )


class Client:
    def __init__(self, r: aioredis.Redis):
        self.r = r
        self.admission = SequenceAdmission(r, 30_000)
        self.count = 0

    async def step(
        self,
        seq: int | str,
        start: bool = False,
        end: bool = False,
        at: int | None = None,
        rid: str | None = None,
    ) -> int:
        self.count += 1
        rid = rid or f"r{self.count}"
        at = at if at is not None else now_ms()
        assert SPEC is not None
        params = SequenceParams(seq, start, end)
        return await self.admission.admit(CONFIG, SPEC, params, request(rid, self.count, at))

    async def binding(self, seq: str) -> dict[bytes, bytes]:
        return await self.r.hgetall(keys.sequence_binding(MODEL, VERSION, seq))

    async def queue(self, seq: str) -> list[int]:
        raw = await self.r.lrange(keys.sequence_queue(MODEL, VERSION, seq), 0, -1)
        return [int(item.split(b":", 1)[0]) for item in raw]


@pytest.fixture
def client(aredis: aioredis.Redis) -> Client:
    return Client(aredis)


async def test_start_goes_to_the_live_instance_with_most_free_slots(client: Client) -> None:
    a = await live(client.r, "w1", 2)
    b = await live(client.r, "w2", 2)
    await live(client.r, "late", 8, until_ms=now_ms() - 1)  # readiness expired: not chosen
    holders = []
    for seq in (1, 2, 3, 4, 5):
        assert await client.step(seq, start=True) == 1
        holders.append((await client.binding(f"u:{seq}"))[b"holder"].decode())
    assert sorted(holders[:4]) == sorted([a, a, b, b]) and holders[0] != holders[1]
    assert holders[4] == ""  # every slot taken: the backlog, as Triton's
    assert await client.r.zrange(keys.sequence_backlog(MODEL, VERSION), 0, -1) == [b"u:5"]
    bells = await client.r.xrange(keys.sequence_bell(MODEL, VERSION, a))
    mine = [f"u:{seq}".encode() for seq, h in zip((1, 2, 3, 4), holders, strict=False) if h == a]
    assert [(f[b"s"], f[b"n"]) for _, f in bells] == [(seq, b"1") for seq in mine]  # one each


async def test_steps_queue_in_arrival_order_and_a_retried_call_queues_once(
    client: Client,
) -> None:
    await live(client.r, "w1", 2)
    await client.step("x", start=True)
    await client.step("x", rid="same")
    assert await client.step("x", rid="same") == 1  # the retry is answered, not queued again
    await client.step("x", end=True)
    assert await client.queue("s:x") == [1, 2, 3]
    binding = await client.binding("s:x")
    assert binding[b"admitted"] == b"3" and binding[b"open"] == b"0"


async def test_tritons_refusals_of_steps_without_start(client: Client) -> None:
    await live(client.r, "w1", 2)
    with pytest.raises(ConchError) as info:
        await client.step(7)
    assert info.value.message == (
        "inference request for sequence 7 to model 'acc' must specify the START flag on the "
        "first request of the sequence"
    )
    await client.step(7, start=True, end=True)
    with pytest.raises(ConchError, match="must specify the START flag"):
        await client.step(7)  # the sequence ended when its END was admitted
    assert await client.step(7, start=True) == 1  # a new sequence with the same id
    assert await client.queue("u:7") == [1, 2]


async def test_no_live_worker_is_answered_at_once(client: Client) -> None:
    assert await client.step(1, start=True) == -1
    await client.r.zadd(READY, {"gone": now_ms() - 30_001})
    assert await client.step(1, start=True) == -1  # ready longer ago than the gone bound
    await client.r.zadd(READY, {"late": now_ms() - 29_000})
    assert await client.step(1, start=True) == 1  # late, not gone: queued (the backlog here)


async def test_an_idle_sequence_is_released_and_then_needs_start(client: Client) -> None:
    instance = await live(client.r, "w1", 2)
    start = now_ms()
    await client.step(3, start=True, at=start)
    store = SequenceStore(client.r, MODEL, VERSION, instance)
    head = (await store.heads(["u:3"]))["u:3"]
    assert head is not None
    results, _ = await store.publish_and_commit(
        [], [StepCommit(head, False, {})], {}, start, IDLE_MS, 60_000, 2
    )
    assert results[0].code == COMMITTED
    # Not idle yet one ms before the timeout; idle (and released) at it.
    assert await client.step(3, at=start + IDLE_MS - 1) == 1
    second = parse_head("u:3", await client.r.lindex(store.queue("u:3"), 0))
    assert second is not None
    when = start + IDLE_MS - 1
    await store.publish_and_commit(
        [], [StepCommit(second, False, {})], {}, when, IDLE_MS, 60_000, 2
    )
    with pytest.raises(ConchError, match="must specify the START flag"):
        await client.step(3, at=start + 2 * IDLE_MS)
    assert await client.binding("u:3") == {}
    assert await client.r.zcard(store.held_key) == 0


async def test_the_holder_releases_its_idle_sequences_and_fills_slots_from_the_backlog(
    client: Client,
) -> None:
    instance = await live(client.r, "w1", 1)
    start = now_ms()
    await client.step("a", start=True, at=start)
    await client.step("b", start=True, at=start)  # backlogged: one slot
    store = SequenceStore(client.r, MODEL, VERSION, instance)
    head = (await store.heads(["s:a"]))["s:a"]
    assert head is not None
    await store.publish_and_commit([], [StepCommit(head, False, {})], {}, start, IDLE_MS, 60_000, 1)
    released, stale = await store.release_idle(start + IDLE_MS, IDLE_MS, 1)
    assert (released, stale) == (["s:a"], [])
    assert (await client.binding("s:b"))[b"holder"] == instance.encode()
    assert await store.held() == ["s:b"]


async def test_commit_is_fenced_and_applies_each_step_once(client: Client) -> None:
    instance = await live(client.r, "w1", 2)
    await client.step(9, start=True)
    await client.step(9)
    store = SequenceStore(client.r, MODEL, VERSION, instance)
    head = (await store.heads(["u:9"]))["u:9"]
    assert head is not None and head.step == 1
    stats = {"success_count": 1, "execution_count": 1}
    reply = Reply(id=head.request.id, model=MODEL, version=VERSION)
    state = {"S": ("1,1", (5).to_bytes(4, "little"))}
    results, _ = await store.publish_and_commit(
        [(keys.reply_stream("gw"), reply)], [StepCommit(head, False, state)], stats,
        now_ms(), IDLE_MS, 60_000, 2,
    )  # fmt: skip
    assert results[0].code == COMMITTED
    assert results[0].following is not None and results[0].following.step == 2
    assert await client.r.xlen(keys.reply_stream("gw")) == 1  # published with the commit
    # The same step again (a retried commit, a late holder): nothing is applied twice.
    other = {"S": ("1,1", (99).to_bytes(4, "little"))}
    results, _ = await store.publish_and_commit(
        [], [StepCommit(head, False, other)], stats, now_ms(), IDLE_MS, 60_000, 2
    )
    assert results[0].code == ALREADY
    binding = await client.binding("u:9")
    assert binding[b"committed"] == b"1" and binding[b"st:S"] == (5).to_bytes(4, "little")
    assert await client.queue("u:9") == [2]
    hash_stats = await client.r.hgetall(keys.stats(MODEL, VERSION))
    assert hash_stats[b"success_count"] == b"1"  # counted once
    # Another instance cannot commit; a step out of order is refused.
    intruder = SequenceStore(client.r, MODEL, VERSION, "w9#0")
    following = results[0].following
    assert following is not None
    results, _ = await intruder.publish_and_commit(
        [], [StepCommit(following, False, {})], {}, now_ms(), IDLE_MS, 60_000, 2
    )
    assert results[0].code == NOT_HOLDER
    skipped = StepCommit(following.__class__(following.sequence, 3, following.request), False, {})
    results, _ = await store.publish_and_commit([], [skipped], {}, now_ms(), IDLE_MS, 60_000, 2)
    assert results[0].code == OUT_OF_ORDER and await client.queue("u:9") == [2]


async def test_end_releases_the_slot_to_the_oldest_backlogged_sequence(client: Client) -> None:
    instance = await live(client.r, "w1", 1)
    await client.step("first", start=True, end=True)
    await client.step("second", start=True)
    await client.step("third", start=True)
    store = SequenceStore(client.r, MODEL, VERSION, instance)
    head = (await store.heads(["s:first"]))["s:first"]
    assert head is not None
    results, pulled = await store.publish_and_commit(
        [], [StepCommit(head, True, {})], {}, now_ms(), IDLE_MS, 60_000, 1
    )
    assert results[0].code == RELEASED and pulled == 1
    assert await client.binding("s:first") == {}
    assert (await client.binding("s:second"))[b"holder"] == instance.encode()
    assert (await client.binding("s:third"))[b"holder"] == b""


async def test_a_dead_holders_sequence_moves_with_its_queue_and_state(client: Client) -> None:
    start = now_ms()
    dead = await live(client.r, "w1", 2, until_ms=start + 60_000)
    await client.step(5, start=True, at=start)
    store = SequenceStore(client.r, MODEL, VERSION, dead)
    head = (await store.heads(["u:5"]))["u:5"]
    assert head is not None
    state = {"S": ("1,1", (41).to_bytes(4, "little"))}
    await store.publish_and_commit(
        [], [StepCommit(head, False, state)], {}, start, IDLE_MS, 60_000, 2
    )
    await client.step(5, at=start)  # queued for w1, which then dies before running it
    alive = await live(client.r, "w2", 2)
    await client.r.zadd(READY, {"w1": start - DEAD_AFTER_MS})  # gone longer than the bound
    # The adoption script refuses while w1 counts as live, then moves everything.
    adopter = SequenceStore(client.r, MODEL, VERSION, alive)
    assert (await adopter.adopt(dead, start, start - 10 * DEAD_AFTER_MS, IDLE_MS))[0] == -1
    done, adopted, released, backlogged = await adopter.adopt(
        dead, start, start - DEAD_AFTER_MS + 1, IDLE_MS
    )
    assert (done, adopted, released, backlogged) == (1, 1, 0, 0)
    binding = await client.binding("u:5")
    assert binding[b"holder"] == alive.encode() and binding[b"committed"] == b"1"
    assert binding[b"st:S"] == (41).to_bytes(4, "little")
    assert await client.queue("u:5") == [2]
    assert (await adopter.heads(["u:5"]))["u:5"] is not None
    assert dead not in await adopter.slot_table()


async def test_a_step_for_a_dead_holder_waits_in_order_for_the_adoption(client: Client) -> None:
    start = now_ms()
    dead = await live(client.r, "w1", 2)
    await client.step(6, start=True, at=start)
    alive = await live(client.r, "w2", 2)
    await client.r.zadd(READY, {"w1": start - DEAD_AFTER_MS - 1})
    assert await client.step(6, at=start) == 1  # queued behind the unexecuted START
    assert (await client.binding("u:6"))[b"holder"] == dead.encode()
    adopter = SequenceStore(client.r, MODEL, VERSION, alive)
    assert (await adopter.adopt(dead, start, start - DEAD_AFTER_MS, IDLE_MS))[:2] == (1, 1)
    assert (await client.binding("u:6"))[b"holder"] == alive.encode()
    assert await client.queue("u:6") == [1, 2]  # both steps moved, in order
    assert await client.r.zrange(keys.sequence_held(MODEL, VERSION, dead), 0, -1) == []
    bells = await client.r.xrange(keys.sequence_bell(MODEL, VERSION, alive))
    assert [f[b"s"] for _, f in bells] == [b"u:6"]


async def test_a_gateway_finds_an_instance_started_after_it_read_the_list(client: Client) -> None:
    first = await live(client.r, "w1", 1)
    await client.step("a", start=True)  # the gateway reads the instances: only w1
    second = await live(client.r, "w2", 1)
    # w1 is full; the script names w2, which the gateway had not passed: read again, placed.
    assert await client.step("b", start=True) == 1
    assert (await client.binding("s:a"))[b"holder"] == first.encode()
    assert (await client.binding("s:b"))[b"holder"] == second.encode()
    # A gateway whose list lacks a sequence's holder finds it the same way.
    other = Client(client.r)
    other.admission._instances[(MODEL, VERSION)] = []
    assert await other.step("a", rid="from-other") == 1
    assert await client.queue("s:a") == [1, 2]


async def test_a_commit_fills_the_freed_slot_from_the_backlog_it_last_read(client: Client) -> None:
    instance = await live(client.r, "w1", 1)
    await client.step("first", start=True, end=True)
    await client.step("second", start=True)
    store = SequenceStore(client.r, MODEL, VERSION, instance)
    await store.reconcile(now_ms(), IDLE_MS, 1)  # reads the backlog's oldest
    assert store.waiting == ["s:second"]
    head = (await store.heads(["s:first"]))["s:first"]
    assert head is not None
    results, pulled = await store.publish_and_commit(
        [], [StepCommit(head, True, {})], {}, now_ms(), IDLE_MS, 60_000, 1
    )
    assert results[0].code == RELEASED and pulled == 1 and store.waiting == []
    assert await store.held() == ["s:second"]
