"""How long a reclaimer may sleep before its next pass without taking over later.

Entries of a dead consumer may be claimed once its last heartbeat is ``dead_bound_ms`` old. A
pass every ``interval_ms`` claims them at most that long after the bound, but wakes the process
(and Redis, once per stream) every interval even when every consumer is alive. When the last
pass found no dead consumer holding entries and no registered service of the kind is late, no
entry can become claimable before ``dead_bound_ms - ttl_ms`` from now (a service alive now beat
within its TTL): the next pass can wait that long, and a service that stops beating meanwhile
is late at that pass, which then returns to the short interval. So the bound, and the delay
past it, stay what they were; only the passes that could find nothing are skipped.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from shared.runtime.clock import now_ms
from shared.wire import keys


async def next_pass_s(
    r: aioredis.Redis,
    kind: str,
    *,
    dead_bound_ms: int,
    ttl_ms: int,
    interval_ms: int,
    found_dead: bool,
) -> float:
    """Seconds until the next reclaim pass. ``found_dead``: the last pass saw a consumer that
    is not live with entries pending (claimed or not yet idle enough)."""
    if found_dead:
        return interval_ms / 1000
    window = max(dead_bound_ms - ttl_ms, interval_ms)
    now = now_ms()
    # Late but not yet past the bound (with room for one slow pass): someone may be dying.
    late = await r.zcount(keys.service_registry(kind), now - window - 2 * interval_ms, now - 1)
    return interval_ms / 1000 if late else window / 1000


async def streams_to_scan(
    r: aioredis.Redis, stream_names: list[str], group: str, me: str, live: set[str]
) -> list[str]:
    """The streams whose group has a consumer other than ``me`` and the live ones: only those
    can hold entries to claim (``streams.reclaim_dead`` looks at them one by one). One
    pipelined round trip for all, instead of one per stream at every pass."""
    if not stream_names:
        return []
    async with r.pipeline(transaction=False) as pipe:
        for stream in stream_names:
            pipe.xinfo_consumers(stream, group)
        replies = await pipe.execute(raise_on_error=False)
    found = []
    for stream, consumers in zip(stream_names, replies, strict=True):
        if isinstance(consumers, Exception):
            found.append(stream)  # let the scan itself say what is wrong
            continue
        names = {_text(c.get("name") or c.get(b"name")) for c in consumers}
        if names - live - {me}:
            found.append(stream)
    return found


def _text(value: str | bytes | None) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
