"""A subscription whose Redis stops answering is found out and replaced, against a real
redis-server behind a proxy that can stall its connections (open, silent both ways).

redis-py's ``listen()`` waits for good on such a connection; every subscriber of the mesh
(cancels, the change feed, log settings, the scheduler's batch-done notices) reads through
``shared.runtime.subscription.published`` instead, which probes a quiet subscription and gives it up
when the probe goes unanswered.
"""

from __future__ import annotations

import asyncio
import math
import time

import pytest
import redis
import redis.asyncio as aioredis

from conch.private_redis import PrivateRedis
from shared.fleet import cancel_listener
from shared.runtime import subscription
from shared.wire import keys
from tests.tcp_proxy import TcpProxy
from tests.waiting import until


async def _messages(pubsub: object, into: list[bytes], **bounds: float) -> None:
    async for message in subscription.published(pubsub, **bounds):
        into.append(message["data"])


async def test_a_stalled_subscription_is_given_up_within_its_bounds(
    redis_server: PrivateRedis,
) -> None:
    with TcpProxy.to_redis(redis_server) as proxy:
        client = aioredis.Redis.from_url(proxy.url())
        try:
            pubsub = client.pubsub()
            await pubsub.subscribe("silence:test")
            heard: list[bytes] = []
            reading = asyncio.create_task(_messages(pubsub, heard, quiet_s=0.3, answer_s=0.5))
            await asyncio.sleep(0.1)
            proxy.stall_all()
            started = time.monotonic()
            with pytest.raises(redis.ConnectionError, match="no answer to a PING"):
                await asyncio.wait_for(reading, 10)
            took = time.monotonic() - started
            # quiet 0.3 s, then 0.5 s for the probe's answer: well under 2 s, never forever
            assert took < 2.0, f"given up after {took:.2f} s"
        finally:
            await client.aclose()


async def test_a_quiet_healthy_subscription_survives_its_probes_and_hears_later_messages(
    redis_server: PrivateRedis,
) -> None:
    client = aioredis.Redis.from_url(redis_server.url)
    publisher = aioredis.Redis.from_url(redis_server.url)
    try:
        pubsub = client.pubsub()
        await pubsub.subscribe("quiet:test")
        heard: list[bytes] = []
        reading = asyncio.create_task(_messages(pubsub, heard, quiet_s=0.1, answer_s=0.5))
        await asyncio.sleep(1.5)  # a dozen probes, each answered
        assert not reading.done(), reading
        await publisher.publish("quiet:test", b"after the quiet")
        assert await until(lambda: heard == [b"after the quiet"], 5), heard
        reading.cancel()
    finally:
        await client.aclose()
        await publisher.aclose()


async def test_a_cancel_listener_on_a_silent_redis_stops_claiming_to_hear_and_comes_back(
    redis_server: PrivateRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a worker's cancel listener claims to be subscribed, the worker skips the Redis read
    that would find a cancellation it missed: a listener silently cut off must stop claiming."""
    monkeypatch.setattr(subscription, "QUIET_S", 0.3)
    monkeypatch.setattr(subscription, "ANSWER_S", 0.5)
    publisher = aioredis.Redis.from_url(redis_server.url)
    with TcpProxy.to_redis(redis_server) as proxy:
        cancelled = cancel_listener.CancelledRequests()
        following = asyncio.create_task(cancel_listener.follow(proxy.url(), cancelled))
        try:
            assert await until(lambda: cancelled.listening_since_ms != math.inf, 5)
            await publisher.publish(keys.cancel_channel(), b"m\x00before")
            assert await until(lambda: "before" in cancelled, 5)

            proxy.stall_all()
            started = time.monotonic()
            assert await until(lambda: cancelled.listening_since_ms == math.inf, 5), (
                "the listener still claims to hear every cancellation"
            )
            assert time.monotonic() - started < 2.5

            proxy.stall_all(False)  # Redis answers new connections again
            assert await until(lambda: cancelled.listening_since_ms != math.inf, 10)
            await publisher.publish(keys.cancel_channel(), b"m\x00after")
            assert await until(lambda: "after" in cancelled, 5)
        finally:
            following.cancel()
            await asyncio.gather(following, return_exceptions=True)
            await publisher.aclose()
