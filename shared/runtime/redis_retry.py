"""Writes that ride out a Redis restart: a refused or dropped connection is retried with
growing pauses (50 ms doubling to 500 ms) until a bound, then raised.

Only for writes that are idempotent, so that one whose connection dropped after Redis ran it does
no harm the second time: the admission scripts record the request id; a worker's replies are
kept once per request by the gateway and its fenced ack refuses an entry already acked.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redis.exceptions import ClusterDownError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

T = TypeVar("T")

# Redis away (a restart, a failover, a cluster electing a new master), not a wrong command.
CONNECTION_ERRORS = (RedisConnectionError, RedisTimeoutError, ClusterDownError, TryAgainError)
FIRST_PAUSE_S = 0.05
LONGEST_PAUSE_S = 0.5


async def until_answered(
    call: Callable[[], Awaitable[T]],
    bound_s: float,
    on_retry: Callable[[Exception], None] | None = None,
) -> T:
    """``call()``'s answer; connection errors retried while ``bound_s`` allows, the last raised.
    ``on_retry`` hears each error that is retried."""
    give_up, pause = time.monotonic() + bound_s, FIRST_PAUSE_S
    while True:
        try:
            return await call()
        except CONNECTION_ERRORS as exc:
            if time.monotonic() + pause > give_up:
                raise
            if on_retry is not None:
                on_retry(exc)
            await asyncio.sleep(pause)
            pause = min(pause * 2, LONGEST_PAUSE_S)
