"""One long-lived Redis connection pool per process, shared by every task in it."""

from __future__ import annotations

import redis.asyncio as aioredis


def connect(url: str, *, max_connections: int = 64, name: str = "conch") -> aioredis.Redis:
    """Binary-safe client (tensor bytes are never decoded) with a bounded pool."""
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=10,
        decode_responses=False,
        health_check_interval=30,
        client_name=name,
    )
    return aioredis.Redis(connection_pool=pool)


def dedicated(url: str, *, name: str = "conch-blocking") -> aioredis.Redis:
    """A single-connection client for a blocking read loop, so it never starves the pool."""
    return aioredis.Redis.from_url(
        url, decode_responses=False, single_connection_client=True, client_name=name
    )
