"""The on_demand placer against real Redis, with fake workers (heartbeats, resident sets and the
index written as workers write them), driven tick by tick."""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import pytest
import redis.asyncio as aioredis

from scheduler.placement.placer import Placer
from scheduler.settings import SchedulerSettings
from shared.fleet import change_feed, control, heartbeats, on_demand
from shared.fleet.control import ControlAck, ControlMessage, IndexEntry
from shared.fleet.on_demand import Resident
from shared.placement import decide
from shared.runtime import clock
from shared.wire import keys

MB = 1 << 20


def settings(redis_url: str, **kw: Any) -> SchedulerSettings:
    kw.setdefault("placer_tick_ms", 50)
    kw.setdefault("placer_lease_ms", 3_000)
    return SchedulerSettings(redis_url=redis_url, model_control_mode="on_demand", **kw)


async def worker(
    r: aioredis.Redis,
    wid: str,
    budget: int = 100 * MB,
    backend: str = "onnxruntime",
    resident: dict[str, Resident] | None = None,
    ttl_ms: int = 30_000,
) -> None:
    info = {"backend": backend, "budget_bytes": str(budget)}
    await heartbeats.heartbeat(r, "worker", wid, info, ttl_ms)
    async with r.pipeline(transaction=False) as pipe:
        on_demand.queue_resident(pipe, wid, resident or {}, ttl_ms)
        await pipe.execute()


async def index(r: aioredis.Redis, **models: tuple[str, int]) -> None:
    entries = {
        name: IndexEntry(versions=[1], not_loaded=True, backend=backend, files_bytes=size)
        for name, (backend, size) in models.items()
    }
    await control.write_index(r, entries)


async def sent(r: aioredis.Redis) -> list[ControlMessage]:
    entries = cast(list[tuple[bytes, dict[bytes, bytes]]], await r.xrange(keys.control_stream()))
    return [control.decode_message(fields[keys.FIELD_DATA]) for _, fields in entries]


async def ticks(placer: Placer, n: int = 3) -> None:
    for _ in range(n):
        await placer.tick()


def idle(used_ago_ms: int, **kw: Any) -> Resident:
    return Resident(bytes=10 * MB, last_used_ms=clock.now_ms() - used_ago_ms, **kw)


async def test_one_load_for_a_hundred_demands_on_the_best_fit(
    aredis: aioredis.Redis, redis_url: str
) -> None:
    await worker(aredis, "roomy", budget=1000 * MB)
    await worker(aredis, "snug", budget=40 * MB)
    await worker(aredis, "torch", budget=35 * MB, backend="pytorch")
    await index(aredis, m=("onnxruntime", 30 * MB))
    firsts = await asyncio.gather(*(on_demand.demand(aredis, "m") for _ in range(100)))
    assert sum(firsts) == 1
    placer = Placer(aredis, settings(redis_url), "s1")
    await ticks(placer, 5)
    [load] = await sent(aredis)
    assert (load.action, load.model, load.target, load.reason) == (
        control.LOAD,
        "m",
        "snug",
        on_demand.LOAD_DEMAND,
    )
    placement = (await on_demand.read_placements(aredis))["m"]
    assert (placement.worker, placement.message_id) == ("snug", load.id)


async def test_ack_ok_ends_placement_and_demand(aredis: aioredis.Redis, redis_url: str) -> None:
    await worker(aredis, "w1")
    await index(aredis, m=("onnxruntime", MB))
    await on_demand.demand(aredis, "m")
    placer = Placer(aredis, settings(redis_url), "s1")
    await placer.tick()
    [load] = await sent(aredis)
    await control.answer(aredis, load.id, ControlAck(worker="w1", status=control.ACK_OK))
    await placer.tick()
    assert await on_demand.read_placements(aredis) == {}
    assert await on_demand.read_demands(aredis) == {}
    assert not await aredis.exists(keys.control_acks(load.id))
    await ticks(placer)
    assert len(await sent(aredis)) == 1


async def test_dead_workers_load_is_retried_on_another(
    aredis: aioredis.Redis, redis_url: str
) -> None:
    await worker(aredis, "w1", budget=20 * MB, ttl_ms=300)  # the best fit, about to die
    await worker(aredis, "w2", budget=500 * MB)
    await index(aredis, m=("onnxruntime", 10 * MB))
    await on_demand.demand(aredis, "m")
    placer = Placer(aredis, settings(redis_url), "s1")
    await placer.tick()
    assert [m.target for m in await sent(aredis)] == ["w1"]
    await placer.tick()  # a load in progress on a live worker: waited for
    assert len(await sent(aredis)) == 1
    await asyncio.sleep(0.35)  # w1's heartbeat expires
    await placer.tick()
    _, retry = await sent(aredis)
    assert (retry.target, retry.reason) == ("w2", on_demand.LOAD_RETRY)
    placement = (await on_demand.read_placements(aredis))["m"]
    assert (placement.worker, placement.tried, placement.message_id) == ("w2", ["w1"], retry.id)


async def test_no_room_goes_elsewhere(aredis: aioredis.Redis, redis_url: str) -> None:
    await worker(aredis, "w1", budget=20 * MB)
    await worker(aredis, "w2", budget=500 * MB)
    await index(aredis, m=("onnxruntime", 10 * MB))
    await on_demand.demand(aredis, "m")
    placer = Placer(aredis, settings(redis_url), "s1")
    await placer.tick()
    [load] = await sent(aredis)
    no_room = ControlAck(worker="w1", status=control.ACK_ERROR, message="no room for 'm'")
    await control.answer(aredis, load.id, no_room)
    await placer.tick()
    _, moved = await sent(aredis)
    assert (moved.target, moved.reason) == ("w2", on_demand.LOAD_DEMAND)
    assert (await on_demand.read_placements(aredis))["m"].tried == ["w1"]
    assert await on_demand.read_demands(aredis) != {}


async def test_no_worker_of_the_backend_records_a_load_error(
    aredis: aioredis.Redis, redis_url: str
) -> None:
    await worker(aredis, "w1")
    await index(aredis, t=("pytorch", MB))
    await on_demand.demand(aredis, "t")
    placer = Placer(aredis, settings(redis_url), "s1")
    await placer.tick()
    assert await aredis.hget(keys.load_errors(), "t") is None  # within the grace: it waits
    old = clock.now_ms() - decide.NO_WORKER_GRACE_MS
    await aredis.hset(keys.demand(), "t", old)
    await placer.tick()
    error = json.loads(await aredis.hget(keys.load_errors(), "t") or b"{}")
    assert "pytorch" in error["message"] and "no live worker serves" in error["message"]
    assert await on_demand.read_demands(aredis) == {}
    assert await sent(aredis) == []


async def test_hot_model_gets_a_copy_on_the_other_worker(
    aredis: aioredis.Redis, redis_url: str
) -> None:
    hot = Resident(bytes=MB, last_used_ms=clock.now_ms(), in_flight=2, capacity=2)
    await worker(aredis, "w1", resident={"m": hot})
    await worker(aredis, "w2")
    await index(aredis, m=("onnxruntime", MB))
    placer = Placer(aredis, settings(redis_url), "s1")
    await placer.tick()
    assert await sent(aredis) == []  # executing at capacity, nothing waiting: enough
    backlog = {"backlog": json.dumps({"m": 6})}
    await heartbeats.heartbeat(aredis, "scheduler", "s1", backlog, 30_000)
    await placer.tick()
    [copy] = await sent(aredis)
    assert (copy.action, copy.target, copy.reason) == (control.LOAD, "w2", on_demand.LOAD_COPY)
    await placer.tick()  # the copy is loading: not asked for again
    assert len(await sent(aredis)) == 1


async def test_idle_copy_unloaded_pinned_never(aredis: aioredis.Redis, redis_url: str) -> None:
    await worker(aredis, "w1", resident={"m": idle(5_000), "p": idle(9_000, pinned=True)})
    await worker(aredis, "w2", resident={"m": idle(1_000), "p": idle(9_000, pinned=True)})
    await index(aredis, m=("onnxruntime", MB), p=("onnxruntime", MB))
    placer = Placer(aredis, settings(redis_url, model_idle_unload_s=10), "s1")
    await placer.tick()
    assert await sent(aredis) == []  # idle 5 s < 10 s
    placer = Placer(aredis, settings(redis_url, model_idle_unload_s=2, model_min_copies=0), "s2")
    await ticks(placer, 1)
    assert await sent(aredis) == []  # s1 still holds the lease
    await aredis.delete(keys.placer_lease())  # s1 gone
    await ticks(placer, 4)
    [unload] = await sent(aredis)  # once, though the resident set still shows it
    assert (unload.action, unload.model, unload.target) == (control.UNLOAD, "m", "w1")
    assert unload.reason == on_demand.UNLOAD_IDLE


async def test_two_placers_only_one_acts(aredis: aioredis.Redis, redis_url: str) -> None:
    await worker(aredis, "w1")
    await index(aredis, m=("onnxruntime", MB))
    await on_demand.demand(aredis, "m")
    a = Placer(aredis, settings(redis_url), "a")
    b = Placer(aredis, settings(redis_url), "b")
    results = await asyncio.gather(a.tick(), b.tick(), a.tick(), b.tick())
    assert sum(1 for r in results for action in r if action.kind == "load") == 1
    assert len(await sent(aredis)) == 1
    assert a.lease.held != b.lease.held


async def test_lease_moves_when_the_holder_stops_renewing(
    aredis: aioredis.Redis, redis_url: str
) -> None:
    fast = settings(redis_url, placer_tick_ms=50, placer_lease_ms=300)
    a, b = Placer(aredis, fast, "a"), Placer(aredis, fast, "b")
    await a.tick()
    await b.tick()
    assert (a.lease.held, b.lease.held) == (True, False)
    await asyncio.sleep(0.2)
    await a.tick()  # renewed: still a's past the first TTL
    await asyncio.sleep(0.2)
    await b.tick()
    assert not b.lease.held
    await asyncio.sleep(0.35)  # a stopped renewing (dead)
    await worker(aredis, "w1")
    await index(aredis, m=("onnxruntime", MB))
    await on_demand.demand(aredis, "m")
    assert [x.kind for x in await b.tick()] == ["load"]
    assert await a.tick() == []  # a is back: its renewal fails, it does not act
    assert not a.lease.held


@pytest.mark.timeout(20)
async def test_idle_loop_sleeps_and_a_demand_notice_wakes_it(
    aredis: aioredis.Redis, redis_url: str
) -> None:
    placer = Placer(aredis, settings(redis_url, placer_tick_ms=250), "s1")
    feed = change_feed.ChangeFeed(redis_url, 60)
    feed.on(change_feed.DEMAND, placer.on_demand_notice)
    tasks = [asyncio.create_task(placer.run()), asyncio.create_task(feed.run())]
    try:
        await asyncio.wait_for(feed.subscribed.wait(), 5)
        start = placer.ticks
        await asyncio.sleep(1.0)
        assert placer.ticks - start <= 6  # about 4 a second, idle
        slow = Placer(
            aredis, settings(redis_url, placer_tick_ms=10_000, placer_lease_ms=30_000), "s1"
        )
        tasks[0].cancel()
        await asyncio.gather(tasks[0], return_exceptions=True)
        feed.on(change_feed.DEMAND, slow.on_demand_notice)
        tasks[0] = asyncio.create_task(slow.run())
        await asyncio.sleep(0.2)  # its first tick: nothing to do, then a 10 s sleep
        await worker(aredis, "w1")
        await index(aredis, m=("onnxruntime", MB))
        await on_demand.demand(aredis, "m")  # announces DEMAND
        for _ in range(40):
            if await sent(aredis):
                break
            await asyncio.sleep(0.05)
        assert [m.target for m in await sent(aredis)] == ["w1"]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert not await aredis.exists(keys.placer_lease())  # released on the way out
