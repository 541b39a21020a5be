"""The change feed's driver against a real redis-server: a safety poll runs every topic's
refreshers at once (their round trips overlap: one wake of the process and of Redis for all of
them, not one per topic), one topic's refreshers in order, and a failed topic is retried soon.
"""

from __future__ import annotations

import asyncio
import contextlib

import redis.asyncio as aioredis

from shared.fleet.change_feed import MODELS, POLICY, TENANTS, ChangeFeed, announce
from shared.fleet.change_feed import named as change_feed_named
from tests.waiting import until


async def test_every_topic_refreshes_at_once_and_one_topics_in_order(redis_url: str) -> None:
    feed = ChangeFeed(redis_url, safety_poll_s=60.0)
    models_started, policy_started = asyncio.Event(), asyncio.Event()
    order: list[str] = []
    done = asyncio.Event()

    async def models_first() -> None:
        models_started.set()
        await policy_started.wait()  # only returns if the policy refresh runs meanwhile
        order.append("models-1")

    async def models_second() -> None:
        order.append("models-2")
        done.set()

    async def policy() -> None:
        policy_started.set()
        await models_started.wait()
        order.append("policy")

    feed.on(MODELS, models_first)
    feed.on(MODELS, models_second)
    feed.on(POLICY, policy)
    task = asyncio.create_task(feed.run())
    try:
        # Run one after the other, each refresher would wait for the other forever.
        async with asyncio.timeout(10):
            await done.wait()
        assert "policy" in order
        assert order.index("models-1") < order.index("models-2")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_failed_topic_is_retried_before_the_next_poll(redis_url: str) -> None:
    feed = ChangeFeed(redis_url, safety_poll_s=60.0)
    calls = {MODELS: 0, TENANTS: 0}
    retried = asyncio.Event()

    async def models() -> None:
        calls[MODELS] += 1
        if calls[MODELS] == 1:
            raise RuntimeError("redis went away")
        retried.set()

    async def tenants() -> None:
        calls[TENANTS] += 1

    feed.on(MODELS, models)
    feed.on(TENANTS, tenants)
    task = asyncio.create_task(feed.run())
    try:
        async with asyncio.timeout(10):  # after RETRY_S, not at the next poll (60 s)
            await retried.wait()
        assert calls[TENANTS] >= 1  # the other topic ran despite the failure beside it
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_notice_that_names_a_model_re_reads_only_it(
    redis_url: str, aredis: aioredis.Redis
) -> None:
    """A fleet of thousands of models: a load's notice must not cost a re-read of all."""
    named = ChangeFeed(redis_url, safety_poll_s=60.0)
    plain = ChangeFeed(redis_url, safety_poll_s=60.0)  # no re-read by name: a full one
    full = {"named": 0, "plain": 0}
    names: list[set[str]] = []

    async def count(which: str) -> None:
        full[which] += 1

    async def by_name(which: set[str]) -> None:
        names.append(which)

    named.on(MODELS, lambda: count("named"))
    named.on_names(MODELS, by_name)
    plain.on(MODELS, lambda: count("plain"))
    tasks = [asyncio.create_task(f.run()) for f in (named, plain)]
    try:
        async with asyncio.timeout(10):
            await named.subscribed.wait()
            await plain.subscribed.wait()
            await asyncio.sleep(0.3)  # the start's and the subscription's full re-reads
            before = dict(full)
            await announce(aredis, change_feed_named(MODELS, "m0634"))
            ok = await until(
                lambda: names == [{"m0634"}] and full["plain"] == before["plain"] + 1, 5
            )
            assert ok, (names, full, before)
            assert full["named"] == before["named"]
            await announce(aredis, MODELS)  # a notice without a name: everything
            after = {"named": before["named"] + 1, "plain": before["plain"] + 2}
            assert await until(lambda: full == after, 5), (full, after)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
