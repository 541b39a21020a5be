"""The policy, ensemble and sequence scripts (shared/lua) on a real Redis and a real Redis
Cluster, one test per script, called through the registry with keys from ``shared.wire.keys``."""

from __future__ import annotations

import time
from typing import Any

import redis.asyncio as aioredis

from gateway.core.sequence_admission import BELL_PAYLOAD_MAX
from scheduler.ensemble import scripts as ensemble_scripts
from scheduler.ensemble.scripts import StepRecord, queue_finish, queue_start, queue_step
from shared import lua
from shared.wire import keys

M, V, T = "cm", 1, "acme"
TENANT_KEYS = [keys.tenants(), keys.api_keys(), keys.tenant_keys(T), keys.tenants_rev()]


async def run(
    r: aioredis.Redis, script: lua.Script, script_keys: list[str], args: list[Any]
) -> Any:
    return await r.eval(script.source, len(script_keys), *script_keys, *args)


async def test_put_tenant(r: aioredis.Redis) -> None:
    assert await run(r, lua.PUT_TENANT, TENANT_KEYS, [T, "{}", "k1", "k2"]) == []
    assert await r.hget(keys.api_keys(), "k1") == T.encode()
    assert await r.smembers(keys.tenant_keys(T)) == {b"k1", b"k2"}
    other = [keys.tenants(), keys.api_keys(), keys.tenant_keys("b"), keys.tenants_rev()]
    assert await run(r, lua.PUT_TENANT, other, ["b", "{}", "k1"]) == [b"k1", T.encode()]
    assert await r.get(keys.tenants_rev()) == b"1"


async def test_delete_tenant(r: aioredis.Redis) -> None:
    assert await run(r, lua.DELETE_TENANT, TENANT_KEYS, [T]) == 0
    await run(r, lua.PUT_TENANT, TENANT_KEYS, [T, "{}", "k1"])
    assert await run(r, lua.DELETE_TENANT, TENANT_KEYS, [T]) == 1
    assert await r.hlen(keys.api_keys()) == 0 and await r.hlen(keys.tenants()) == 0
    assert await r.get(keys.tenants_rev()) == b"2"


async def test_token_bucket(r: aioredis.Redis) -> None:
    buckets = [keys.rate_bucket(T), keys.rate_bucket(T, M)]
    now = 1_000_000_000
    assert await run(r, lua.TOKEN_BUCKET, buckets, [now, 10, 1, 100, 5]) == 0
    assert await run(r, lua.TOKEN_BUCKET, buckets, [now, 10, 1, 100, 5]) == 100_000
    assert await r.hget(keys.rate_bucket(T, M), "tokens") == b"4"
    assert await r.pttl(keys.rate_bucket(T)) > 0


async def test_trace_take_one(r: aioredis.Redis) -> None:
    remaining = keys.trace_remaining(M)
    assert await run(r, lua.TRACE_TAKE_ONE, [remaining], []) == 1  # not limited
    await r.set(remaining, 1)
    assert [await run(r, lua.TRACE_TAKE_ONE, [remaining], []) for _ in range(2)] == [1, 0]


async def test_ensemble_start(r: aioredis.Redis) -> None:
    state = keys.ensemble_state(M, V, "r1")
    for expected in (1, None):
        async with r.pipeline(transaction=False) as pipe:
            queue_start(pipe, state, b"req", "entry", 60_000, {"c:0": "child"})
            (answer,) = await pipe.execute()
        if expected is None:
            assert ensemble_scripts.parse_state(answer)[b"c:0"] == b"child"
        else:
            assert answer == 1
    assert await r.pttl(state) > 0


async def test_ensemble_step(r: aioredis.Redis) -> None:
    state, steps = keys.ensemble_state(M, V, "r1"), keys.ensemble_steps(M, V)
    await r.hset(state, mapping={"req": "x", "entry": "e"})
    await r.xgroup_create(steps, keys.SCHEDULER_GROUP, id="0", mkstream=True)
    entry = await r.xadd(steps, {"d": "reply"})
    await r.xreadgroup(keys.SCHEDULER_GROUP, "s1", {steps: ">"})
    record = StepRecord(state, 0, expected=4, tensors=[("OUT", b"v")], children={})
    async with r.pipeline(transaction=False) as pipe:
        queue_step(pipe, steps, entry, [record])
        assert await pipe.execute() == [[1]]  # req, entry, d:0, t:OUT: the plan stands
    assert await r.hget(state, "t:OUT") == b"v"
    assert await r.xlen(steps) == 0


async def test_ensemble_finish(r: aioredis.Redis) -> None:
    stream, state = keys.request_stream(M, V, 0), keys.ensemble_state(M, V, "r1")
    await r.hset(state, "req", "x")
    await r.xgroup_create(stream, keys.SCHEDULER_GROUP, id="0", mkstream=True)
    entry = (await r.xadd(stream, {"d": "x"})).decode()
    await r.xreadgroup(keys.SCHEDULER_GROUP, "s1", {stream: ">"})
    finished = [(state, stream, entry, {"success_count": 1, "compute_infer_ns": 5})]
    for expected in ([1], [0]):
        async with r.pipeline(transaction=False) as pipe:
            queue_finish(pipe, keys.stats(M, V), finished, 42)
            assert await pipe.execute() == [expected]
    assert await r.hgetall(keys.stats(M, V)) == {
        b"success_count": b"1",
        b"compute_infer_ns": b"5",
        b"last_inference": b"42",
    }
    assert await r.exists(state) == 0 and await r.xlen(stream) == 0
    # The script's counter names are COUNTERS, in the same order.
    places = [lua.ENSEMBLE_FINISH.source.index(f"'{name}'") for name in ensemble_scripts.COUNTERS]
    assert places == sorted(places)


# --- sequences: one instance "w1#0" with one slot; the step's request is a plain payload ---
INST, IDLE = "w1#0", 1000
OWN = [keys.sequence_held(M, V, INST), keys.sequence_bell(M, V, INST), keys.sequence_backlog(M, V)]


async def admit(
    r: aioredis.Redis, now: int, seq: str = "s", rid: str = "r1", known: tuple[str, ...] = (INST,)
) -> Any:
    await r.zadd(keys.ready(M, V), {"w1": now + 60_000})
    await r.hset(keys.sequence_slots(M, V), INST, 1)
    script_keys = [
        keys.ready(M, V),
        keys.sequence_binding(M, V, seq),
        keys.sequence_queue(M, V, seq),
        keys.admitted(M, rid),
        keys.sequence_slots(M, V),
        keys.sequence_backlog(M, V),
        *keys.sequence_instance_keys(M, V, known),
    ]
    args = [now, IDLE, IDLE + 600_000, 1, 0, seq, b"payload", 10_000, now - 30_000]
    return await run(r, lua.SEQUENCE_ADMIT, script_keys, [*args, len(known), *known])


async def test_sequence_admit(r: aioredis.Redis) -> None:
    assert f"local BELL_PAYLOAD_MAX = {BELL_PAYLOAD_MAX}\n" in lua.SEQUENCE_ADMIT.source
    now = int(time.time() * 1000)
    # An instance list without the slots hash's instance: nothing written, the instance named.
    assert await admit(r, now, known=()) == [-4, 0, 0, INST.encode()]
    assert await r.exists(keys.admitted(M, "r1"), keys.sequence_binding(M, V, "s")) == 0
    assert await admit(r, now) == [1, 0, 0]
    assert await admit(r, now) == [2, 0, 0]  # the same request again
    assert await admit(r, now, rid="r2", known=()) == [-4, 0, 0, INST.encode()]  # its holder
    assert (await r.hgetall(keys.sequence_binding(M, V, "s")))[b"holder"] == INST.encode()
    assert await r.lrange(keys.sequence_queue(M, V, "s"), 0, -1) == [b"1:payload"]
    assert await r.zscore(keys.sequence_held(M, V, INST), "s") == now + IDLE
    (bell,) = await r.xrange(keys.sequence_bell(M, V, INST))
    assert bell[1] == {b"s": b"s", b"n": b"1", b"d": b"payload"}


def commit_args(now: int, seq: str, step: int, ended: int, waiting: list[str]) -> list[Any]:
    head = [now, INST, IDLE, 600_000, 1, 1, seq, step, ended, 1, "S", "1", b"\x01", 1, now, "n", 1]
    return [*head, len(waiting), *waiting]


async def test_sequence_commit(r: aioredis.Redis) -> None:
    now = int(time.time() * 1000)
    await admit(r, now)
    script_keys = [*OWN, keys.stats(M, V), *keys.sequence_keys(M, V, ["s"])]
    args = commit_args(now, "s", 1, 0, [])
    assert await run(r, lua.SEQUENCE_COMMIT, script_keys, args) == [1, b"", 0, []]
    binding = await r.hgetall(keys.sequence_binding(M, V, "s"))
    assert (binding[b"committed"], binding[b"st:S"], binding[b"sh:S"]) == (b"1", b"\x01", b"1")
    assert await r.llen(keys.sequence_queue(M, V, "s")) == 0
    assert await r.hget(keys.stats(M, V), "n") == b"1"
    assert await run(r, lua.SEQUENCE_COMMIT, script_keys, args) == [2, b"", 0, []]


async def test_sequence_commit_fills_the_freed_slot_from_the_backlog(r: aioredis.Redis) -> None:
    now = int(time.time() * 1000)
    await admit(r, now)
    await admit(r, now, seq="b1", rid="r2")  # one slot: backlogged
    await admit(r, now, seq="b2", rid="r3")
    await r.hset(keys.sequence_binding(M, V, "s"), "open", "0")  # its END was admitted
    step_keys = [*OWN, keys.stats(M, V), *keys.sequence_keys(M, V, ["s"])]
    # Without the backlogged sequence's keys the commit names it (for sequence_pull.lua).
    reply = await run(r, lua.SEQUENCE_COMMIT, step_keys, commit_args(now, "s", 1, 1, []))
    assert reply == [4, b"", 0, [b"b1"]]
    assert await r.zcard(keys.sequence_held(M, V, INST)) == 0
    pull_keys = [*OWN, keys.sequence_binding(M, V, "b1")]
    assert await run(r, lua.SEQUENCE_PULL, pull_keys, [now, INST, IDLE, 1, 1, "b1"]) == [1, []]
    assert await r.hget(keys.sequence_binding(M, V, "b1"), "holder") == INST.encode()
    # With them, in the commit itself.
    await r.hset(keys.sequence_binding(M, V, "b1"), "open", "0")
    b1_keys = [*OWN, keys.stats(M, V), *keys.sequence_keys(M, V, ["b1"])]
    b1_keys.append(keys.sequence_binding(M, V, "b2"))
    reply = await run(r, lua.SEQUENCE_COMMIT, b1_keys, commit_args(now, "b1", 1, 1, ["b2"]))
    assert reply == [4, b"", 1, []]
    assert await r.zrange(keys.sequence_held(M, V, INST), 0, -1) == [b"b2"]
    assert await r.zcard(keys.sequence_backlog(M, V)) == 0


async def test_sequence_pull(r: aioredis.Redis) -> None:
    now = int(time.time() * 1000)
    await admit(r, now)
    await admit(r, now, seq="b1", rid="r2")
    await r.hset(keys.sequence_slots(M, V), INST, 2)
    args = [now, INST, IDLE, 2, 0]
    assert await run(r, lua.SEQUENCE_PULL, OWN, args) == [0, [b"b1"]]  # keys missing: named
    pull_keys = [*OWN, keys.sequence_binding(M, V, "b1")]
    assert await run(r, lua.SEQUENCE_PULL, pull_keys, [now, INST, IDLE, 2, 1, "b1"]) == [1, []]
    assert await r.xlen(keys.sequence_bell(M, V, INST)) == 2  # s's admission, then b1's pull


async def test_sequence_release_idle(r: aioredis.Redis) -> None:
    now = int(time.time() * 1000)
    await admit(r, now)
    await r.delete(keys.sequence_queue(M, V, "s"))  # nothing queued: idle after IDLE ms
    script_keys = [*OWN, *keys.sequence_keys(M, V, ["s"])]
    args = [now, INST, IDLE, 1, 1, "s", 0]
    assert await run(r, lua.SEQUENCE_RELEASE_IDLE, script_keys, args) == [b""]  # not due
    later = [now + IDLE + 1, INST, IDLE, 1, 1, "s", 0]
    assert await run(r, lua.SEQUENCE_RELEASE_IDLE, OWN, [*later[:4], 0, 0]) == [b""]  # not passed
    assert await run(r, lua.SEQUENCE_RELEASE_IDLE, script_keys, later) == [b"s", b""]
    assert await r.exists(keys.sequence_binding(M, V, "s"), OWN[0]) == 0


async def test_sequence_adopt(r: aioredis.Redis) -> None:
    now = int(time.time() * 1000)
    await admit(r, now)
    await r.zadd(keys.ready(M, V), {"w1": now - 10_000, "w2": now + 60_000})
    await r.hset(keys.sequence_slots(M, V), "w2#0", 1)
    fixed = [keys.ready(M, V), keys.sequence_slots(M, V), keys.sequence_backlog(M, V)]

    async def adopt(dead_before: int, instances: list[str], held: list[str]) -> Any:
        script_keys = [
            *fixed,
            *keys.sequence_instance_keys(M, V, instances),
            *keys.sequence_keys(M, V, held),
        ]
        args = [now, dead_before, IDLE, 0, len(instances), *instances, len(held), *held]
        return await run(r, lua.SEQUENCE_ADOPT, script_keys, args)

    both = [INST, "w2#0"]
    assert await adopt(now - 20_000, both, ["s"]) == [-1, 0, 0, 0]  # live
    assert await adopt(now, [INST], ["s"]) == [-2, 0, 0, 0]  # an instance not passed
    assert await adopt(now, both, []) == [-2, 0, 0, 0]  # a held sequence not passed
    assert await adopt(now, both, ["s"]) == [1, 1, 0, 0]
    assert await r.hget(keys.sequence_binding(M, V, "s"), "holder") == b"w2#0"
    assert await r.hkeys(keys.sequence_slots(M, V)) == [b"w2#0"]
    assert await r.xlen(keys.sequence_bell(M, V, "w2#0")) == 1


async def test_sequence_cancel(r: aioredis.Redis) -> None:
    now = int(time.time() * 1000)
    await admit(r, now)
    script_keys = [*OWN, keys.stats(M, V), *keys.sequence_keys(M, V, ["s"])]
    args = [now, INST, IDLE, 1, 1, "s", 0]
    assert await run(r, lua.SEQUENCE_CANCEL, script_keys, args) == [[b"1:payload"], 0, []]
    assert await run(r, lua.SEQUENCE_CANCEL, script_keys, args) == [[], 0, []]
    assert await r.exists(keys.sequence_binding(M, V, "s"), keys.sequence_queue(M, V, "s")) == 0
    assert await r.hget(keys.stats(M, V), "cancel_count") == b"1"
