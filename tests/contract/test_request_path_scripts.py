"""The request path's scripts (shared/lua) on a real Redis and a real Redis Cluster, one test per
script: each called through the registry with keys from ``shared.wire.keys``, asserting the reply
and the writes its header documents."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis.asyncio as aioredis

from shared import lua
from shared.fleet import dead_letters, publish, readiness
from shared.fleet.admission_script import admission_call
from shared.fleet.fencing import dispatch_args, queue_fenced_ack, queue_fenced_ack_many
from shared.wire import keys

M, V = "cm", 1


def now_ms() -> int:
    return int(time.time() * 1000)


async def run(
    r: aioredis.Redis, script: lua.Script, script_keys: list[str], args: list[Any]
) -> Any:
    return await r.eval(script.source, len(script_keys), *script_keys, *args)


async def pending(r: aioredis.Redis, stream: str, group: str, consumer: str, n: int) -> list[bytes]:
    """``n`` entries added to ``stream`` and read by ``consumer`` of ``group``: their ids."""
    await r.xgroup_create(stream, group, id="0", mkstream=True)
    for i in range(n):
        await r.xadd(stream, {"d": str(i)})
    read = await r.xreadgroup(group, consumer, {stream: ">"})
    return [entry_id for entry_id, _ in read[0][1]]


async def test_the_registry_sha_is_what_redis_computes(r: aioredis.Redis) -> None:
    for script in lua.SCRIPTS.values():
        loaded = await r.script_load(script.source)
        assert (loaded.decode() if isinstance(loaded, bytes) else loaded) == script.sha


@pytest.mark.parametrize("direct", [False, True])
async def test_enqueue(r: aioredis.Redis, direct: bool) -> None:
    now = now_ms()

    def call(rid: str) -> Any:
        return admission_call(
            model=M, version=V, priority=0, request_id=rid, now_ms=now, deadline_ms=now + 5000,
            gone_ms=30_000, max_queue_size=0, header=b"h", data=b"d",
            direct_levels=(0,) if direct else (),
        )  # fmt: skip

    first = call("a")
    assert await run(r, lua.ENQUEUE, first.keys, first.args) == -1  # no worker
    await r.zadd(keys.ready(M, V), {"w": now + 10_000})
    assert await run(r, lua.ENQUEUE, first.keys, first.args) == (2 if direct else 1)
    assert await run(r, lua.ENQUEUE, first.keys, first.args) == 1  # a retry queues nothing
    stream = keys.batch_stream(M, V) if direct else keys.request_stream(M, V, 0)
    assert await r.xlen(stream) == 1
    assert await r.exists(keys.admitted(M, "a")) == 1
    if direct:  # not idle any more: the next request is queued for a scheduler
        second = call("b")
        assert await run(r, lua.ENQUEUE, second.keys, second.args) == 1
        assert await r.xlen(keys.request_stream(M, V, 0)) == 1


async def test_dispatch(r: aioredis.Redis) -> None:
    stream = keys.request_stream(M, V, 0)
    ids = await pending(r, stream, keys.SCHEDULER_GROUP, "s1", 2)
    script_keys, args = dispatch_args(keys.batch_stream(M, V), "s2", b"batch", {stream: ids})
    assert await run(r, lua.DISPATCH, script_keys, args) == [-1, 1, ids[0], 1, ids[1]]
    assert await r.xlen(keys.batch_stream(M, V)) == 0
    script_keys, args = dispatch_args(keys.batch_stream(M, V), "s1", b"batch", {stream: ids})
    assert await run(r, lua.DISPATCH, script_keys, args) == [1]
    assert await r.xlen(stream) == 0
    assert (await r.xrange(keys.batch_stream(M, V)))[0][1] == {b"d": b"batch"}


async def test_fenced_ack(r: aioredis.Redis) -> None:
    stream, stats = keys.batch_stream(M, V), keys.stats(M, V)
    (entry,) = await pending(r, stream, keys.WORKER_GROUP, "w1", 1)
    for owner, expected in (("w2", 0), ("w1", 1), ("w1", 0)):
        async with r.pipeline(transaction=False) as pipe:
            queue_fenced_ack(
                pipe, stream, stats, keys.WORKER_GROUP, owner, entry,
                counters={"success_count": 3}, last_inference_ms=7, batch_size=3,
            )  # fmt: skip
            assert await pipe.execute() == [expected]
    assert await r.hgetall(stats) == {
        b"success_count": b"3",
        b"last_inference": b"7",
        b"last_batch": b"3",
    }
    assert await r.xlen(stream) == 0


@pytest.mark.parametrize(
    ("script", "counter"),
    [(lua.FENCED_ACK_MANY, "fail_count"), (lua.CANCEL_ACK, "cancel_count")],
    ids=["fenced_ack_many", "cancel_ack"],
)
async def test_ack_many(r: aioredis.Redis, script: lua.Script, counter: str) -> None:
    streams = [keys.request_stream(M, V, 0), keys.request_stream(M, V, 1)]
    ids = [await pending(r, s, keys.SCHEDULER_GROUP, "s1", 2) for s in streams]
    args: list[Any] = [keys.SCHEDULER_GROUP, "s1"]
    for some in ids:
        args += [len(some), *some]
    if script is lua.FENCED_ACK_MANY:
        async with r.pipeline(transaction=False) as pipe:
            queue_fenced_ack_many(
                pipe,
                keys.stats(M, V),
                keys.SCHEDULER_GROUP,
                "s1",
                dict(zip(streams, ids, strict=True)),
            )
            assert await pipe.execute() == [4]  # fmt: skip
    else:
        assert await run(r, script, [keys.stats(M, V), *streams], args) == 4
    assert await run(r, script, [keys.stats(M, V), *streams], args) == 0
    assert await r.hget(keys.stats(M, V), counter) == b"4"
    assert [await r.xlen(s) for s in streams] == [0, 0]


async def test_dead_letter(r: aioredis.Redis) -> None:
    stream = keys.request_stream(M, V, 0)
    (entry,) = await pending(r, stream, keys.SCHEDULER_GROUP, "s1", 1)
    common: dict[str, Any] = dict(
        stage="scheduler", model=M, version=V, stream=stream, group=keys.SCHEDULER_GROUP,
        entry_id=entry, reason="poison",
    )  # fmt: skip
    assert not await dead_letters.move(r, consumer="s2", **common)
    assert await dead_letters.move(r, consumer="s1", **common)
    (moved,) = await r.xrange(keys.dead_letters(M))
    assert moved[1][b"reason"] == b"poison" and moved[1][b"d"] == b"0"
    assert await r.xlen(stream) == 0


async def test_add_stats(r: aioredis.Redis) -> None:
    async with r.pipeline(transaction=False) as pipe:
        publish.add_stats(pipe, keys.stats(M, V), {"success_count": 2, "fail_count": 1}, 9)
        publish.add_stats(pipe, keys.stats(M, V), {"success_count": 2}, 10)
        await pipe.execute()
    assert await r.hgetall(keys.stats(M, V)) == {
        b"success_count": b"4",
        b"fail_count": b"1",
        b"last_inference": b"10",
    }


async def test_mark_ready(r: aioredis.Redis) -> None:
    await readiness.mark_ready(r, "w1", {(M, V): 2}, 5000)
    assert await r.zscore(keys.ready(M, V), "w1") > now_ms()
    assert await r.hget(keys.instances(M, V), "w1") == b"2"
    now = now_ms()
    args = ["w1", now + 9000, now, keys.changes_channel(), "models"]
    assert await run(r, lua.MARK_READY, [keys.ready(M, V)], args) == 0
    assert await r.zscore(keys.ready(M, V), "w1") == now + 9000
