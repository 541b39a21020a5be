"""The token bucket script (shared/lua/token_bucket.lua) on a real redis-server.

Time is passed explicitly (ARGV[1], microseconds) so the arithmetic is checked exactly; the
gateways pass 0 and the script uses Redis's own clock.
"""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from gateway.core.auth import RateLimit, Tenant
from gateway.core.ratelimit import RateLimiter
from shared.wire import keys
from shared.wire.errors import ConchError, ErrorCode

T0 = 1_700_000_000_000_000
LIMIT = RateLimit(requests_per_second=50, burst=10)
BUCKET = [(keys.rate_bucket("acme"), LIMIT)]


async def take(limiter: RateLimiter, n: int, now_us: int, buckets=BUCKET) -> list[int]:
    return [await limiter.wait_us(buckets, now_us) for _ in range(n)]


async def test_burst_then_refill_at_the_rate(aredis: aioredis.Redis) -> None:
    limiter = RateLimiter(aredis)
    assert await take(limiter, 10, T0) == [0] * 10
    # Empty: the next token comes in 1/50 s.
    assert await limiter.wait_us(BUCKET, T0) == 20_000
    assert await limiter.wait_us(BUCKET, T0 + 10_000) == 10_000
    assert await limiter.wait_us(BUCKET, T0 + 20_000) == 0
    # One second later 50 tokens have come back, but never more than the burst.
    assert await take(limiter, 11, T0 + 2_000_000) == [0] * 10 + [20_000]


async def test_a_saturated_tenant_gets_burst_plus_rate_times_window(aredis: aioredis.Redis) -> None:
    limiter = RateLimiter(aredis)
    admitted = 0
    for step in range(1000):  # 200 requests/s for 5 s
        admitted += await limiter.wait_us(BUCKET, T0 + step * 5_000) == 0
    assert admitted == 10 + 250 - 1  # the last request arrives at 4.995 s


async def test_gateways_together_admit_what_one_would(redis_url: str) -> None:
    """Three clients (as three gateway processes) racing for the same bucket."""
    clients = [aioredis.Redis.from_url(redis_url) for _ in range(3)]
    try:
        limiters = [RateLimiter(c) for c in clients]
        results = await asyncio.gather(
            *(limiters[i % 3].wait_us(BUCKET, T0) for i in range(60)), return_exceptions=False
        )
        assert sum(1 for r in results if r == 0) == 10
    finally:
        for client in clients:
            await client.aclose()


async def test_every_bucket_must_have_a_token_or_none_is_taken(aredis: aioredis.Redis) -> None:
    limiter = RateLimiter(aredis)
    model_limit = RateLimit(requests_per_second=1, burst=2)
    both = [*BUCKET, (keys.rate_bucket("acme", "mlp"), model_limit)]
    assert await take(limiter, 2, T0, both) == [0, 0]
    assert await limiter.wait_us(both, T0) == 1_000_000  # the model bucket is empty
    # The refused request took nothing from the tenant bucket: 8 tokens are left there.
    assert await take(limiter, 9, T0) == [0] * 8 + [20_000]


async def test_limits_change_at_runtime(aredis: aioredis.Redis) -> None:
    limiter = RateLimiter(aredis)
    assert await take(limiter, 10, T0) == [0] * 10
    faster = [(keys.rate_bucket("acme"), RateLimit(requests_per_second=1000, burst=5))]
    assert await limiter.wait_us(faster, T0 + 1_000) == 0


async def test_admit_raises_429_with_retry_after(aredis: aioredis.Redis) -> None:
    limiter = RateLimiter(aredis)
    tenant = Tenant(name="slowpoke", rate_limit=RateLimit(requests_per_second=0.5, burst=1))
    await limiter.admit(tenant, "simple")
    with pytest.raises(ConchError) as caught:
        await limiter.admit(tenant, "simple")
    assert caught.value.code == ErrorCode.RESOURCE_EXHAUSTED
    assert 1.0 < caught.value.retry_after_s <= 2.0
    assert "0.5 requests/s with burst 1" in caught.value.message
    await limiter.admit(None, "simple")  # anonymous without a tenant: no limit
    await limiter.admit(Tenant(name="free"), "simple")
    ttl = await aredis.pttl(keys.rate_bucket("slowpoke"))
    assert 0 < ttl <= 3000  # an idle bucket expires once it would be full again
