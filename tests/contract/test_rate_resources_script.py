"""``shared/lua/rate_resources.lua`` on a real Redis and a real Redis Cluster: copies counted,
leases that give a dead holder's copies back, the default count, and the order of waiters."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from shared import lua
from shared.wire import keys

R1 = keys.rate_resource("R1", "hostA/gpu0")
R2 = keys.rate_resource("R2", "global")
LEASE = 1000


async def call(r: aioredis.Redis, op: str, token: str, now: int, *args: Any, k: Any = None) -> Any:
    script_keys = k or [R1]
    script = lua.RATE_RESOURCES
    return await r.eval(script.source, len(script_keys), *script_keys, op, token, now, LEASE, *args)


async def acquire(
    r: aioredis.Redis, token: str, now: int, need: int, have: int, pass_: int = 0, stride: int = 1
) -> list[int]:
    answer = await call(r, "acquire", token, now, pass_, stride, need, have)
    return [int(x) for x in answer]


async def test_copies_are_counted_and_released(r: aioredis.Redis) -> None:
    assert (await acquire(r, "a", 1000, 1, 2))[0] == 1
    assert (await acquire(r, "b", 1000, 1, 2))[0] == 1
    assert (await acquire(r, "c", 1000, 1, 2))[0] == 0  # both copies held
    assert await call(r, "release", "a", 1001) == 1
    assert (await acquire(r, "c", 1002, 1, 2))[0] == 1
    assert await r.hexists(R1, "w:c") == 0  # no longer waiting
    assert await r.pttl(R1) > 0


async def test_a_holder_that_stops_renewing_gives_its_copies_back(r: aioredis.Redis) -> None:
    assert (await acquire(r, "dead", 1000, 1, 1))[0] == 1
    assert (await acquire(r, "live", 1500, 1, 1))[0] == 0
    assert await call(r, "renew", "dead", 1900) == 1  # renewed: held until 2900
    assert (await acquire(r, "live", 2500, 1, 1))[0] == 0
    assert (await acquire(r, "live", 2900, 1, 1))[0] == 1  # the lease ran out
    assert await r.hexists(R1, "h:dead") == 0
    assert await call(r, "renew", "dead", 3000) == 0  # it no longer holds them


async def test_the_default_count_is_the_largest_any_instance_asks_for(r: aioredis.Redis) -> None:
    assert (await acquire(r, "small", 1000, 1, 0))[0] == 1
    assert (await acquire(r, "other", 1000, 1, 0))[0] == 0  # one copy: the largest need is 1
    await call(r, "release", "other", 1000)
    assert (await acquire(r, "big", 1000, 3, 0))[0] == 0  # 1 + 3 > 3
    assert int(await r.hget(R1, "max") or 0) == 3
    assert (await acquire(r, "other", 1001, 1, 0))[0] == 0  # "big" waits first
    await call(r, "release", "big", 1001)
    assert (await acquire(r, "other", 1002, 1, 0))[0] == 1  # 1 + 1 <= 3


async def test_all_or_none_of_several_resources(r: aioredis.Redis) -> None:
    both = [R1, R2]
    assert (await call(r, "acquire", "x", 1000, 0, 1, 1, 1, 1, 1, k=[R2]))[0] == 1
    assert (await call(r, "acquire", "y", 1000, 0, 1, 1, 1, 1, 1, k=both))[0] == 0
    assert await r.hexists(R1, "h:y") == 0  # R1 was free, but none is taken
    await call(r, "release", "x", 1001, k=[R2])
    assert (await call(r, "acquire", "y", 1002, 0, 1, 1, 1, 1, 1, k=both))[0] == 1


async def test_waiters_go_by_pass_then_arrival(r: aioredis.Redis) -> None:
    assert (await acquire(r, "z", 1000, 1, 1))[0] == 1
    assert await acquire(r, "lo", 1001, 1, 1, pass_=5, stride=2) == [0, 5]
    assert await acquire(r, "hi", 1002, 1, 1, pass_=3, stride=1) == [0, 3]
    await call(r, "release", "z", 1003)
    assert await acquire(r, "lo", 1004, 1, 1, pass_=5, stride=2) == [0, 5]  # "hi" is ahead
    assert await acquire(r, "hi", 1005, 1, 1, pass_=3, stride=1) == [1, 4]  # pass + stride
    await call(r, "release", "hi", 1006)
    assert await acquire(r, "lo", 1007, 1, 1, pass_=5, stride=2) == [1, 7]
    await call(r, "release", "lo", 1008)
    # A newcomer starts at the pass of the last grant, not below everyone (no catching up).
    assert await acquire(r, "new", 1009, 1, 1, pass_=0, stride=1) == [1, 6]


async def test_priority_two_is_granted_half_as_often(r: aioredis.Redis) -> None:
    """Two instances that always want to run: the holder releases and asks again at once,
    beside the other one waiting. Stride scheduling grants the one of priority 2 half as often
    (Triton's weighting). Priority orders the instances waiting when a copy frees up; with no
    other waiter, the one asking runs."""
    passes = {"p1": 0, "p2": 0}
    strides = {"p1": 1, "p2": 2}
    grants = {"p1": 0, "p2": 0}

    async def ask(token: str, now: int) -> bool:
        granted, passes[token] = await acquire(r, token, now, 1, 1, passes[token], strides[token])
        grants[token] += granted
        return granted == 1

    holder, other = "p1", "p2"
    assert await ask(holder, 1000)
    assert not await ask(other, 1000)
    for now in range(1001, 1061):
        await call(r, "release", holder, now)
        if not await ask(holder, now):
            assert await ask(other, now)
            holder, other = other, holder
    assert sum(grants.values()) == 61
    assert 1.8 <= grants["p1"] / grants["p2"] <= 2.2, grants
