"""Redis Streams helpers: group creation, reading, and reclaiming the entries of dead consumers.

Delivery is at-least-once: an entry stays pending in its consumer group until the consumer acks
it after publishing the outcome. A consumer that dies leaves its entries pending; a live consumer
takes them over only once the dead one's heartbeat is older than the *dead* bound (10 s by
default, well above a scheduling hiccup or a 5 s freeze), and only entries idle for that long
(``XCLAIM`` with min-idle-time): two reclaimers cannot both take an entry, because the first
claim resets its idle time. The old owner, if it was only frozen, finds its ack fenced off
(``shared.fleet.fencing``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

log = logging.getLogger(__name__)

# The RESP2 shapes of the replies read here. The clients are made with decode_responses=False, so
# every string comes back as bytes; redis-py's annotations allow str too (for decoding clients),
# hence the casts to these below.
_Message = tuple[bytes, dict[bytes, bytes]]
# {"message_id": bytes, "consumer": bytes, "times_delivered": int, ...}
_PendingRow = dict[str, Any]


@dataclass(frozen=True)
class Entry:
    stream: bytes
    entry_id: bytes
    fields: dict[bytes, bytes]
    # How many times the group has delivered this entry, this delivery included.
    deliveries: int = 1


async def ensure_group(r: aioredis.Redis, stream: str, group: str) -> None:
    """Create the group at the stream's start (so nothing enqueued earlier is skipped)."""
    try:
        await r.xgroup_create(stream, group, id="0", mkstream=True)
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


async def ensure_groups(r: aioredis.Redis, streams: Iterable[str], group: str) -> None:
    for stream in streams:
        await ensure_group(r, stream, group)


def parse_read(reply: list[Any] | dict[Any, Any] | None) -> list[Entry]:
    """Flatten an XREAD/XREADGROUP reply (RESP2 list form) into entries."""
    entries: list[Entry] = []
    if not reply:
        return entries
    items = reply.items() if isinstance(reply, dict) else reply
    for stream, messages in items:
        for entry_id, fields in messages:
            if fields:  # an entry deleted after delivery reads back as empty
                entries.append(Entry(stream, entry_id, fields))
    return entries


async def reclaim_dead(
    r: aioredis.Redis,
    stream: str,
    group: str,
    me: str,
    live: set[str],
    min_idle_ms: int,
    count: int = 100,
    dead_pending: list[str] | None = None,
) -> list[Entry]:
    """Claim the entries of consumers not in ``live`` that have been idle ``min_idle_ms``;
    drop dead consumers with nothing pending.

    ``live``: the consumers whose heartbeat is within the dead bound. An entry another reclaimer
    claimed a moment ago is no longer idle and stays with it. Entries deleted while pending are
    dropped from the pending list by XCLAIM itself (Redis 7)."""
    try:
        consumers = await r.xinfo_consumers(stream, group)
    except ResponseError:
        return []
    claimed: list[Entry] = []
    for consumer in cast(list[dict[str | bytes, Any]], consumers):  # RESP2 may key by bytes
        name = _text(consumer.get("name") or consumer.get(b"name"))
        pending = int(consumer.get("pending") or consumer.get(b"pending") or 0)
        if name == me or name in live:
            continue
        if pending == 0:
            await r.xgroup_delconsumer(stream, group, name)
            continue
        if dead_pending is not None:  # the reclaimer's pace (``shared.fleet.reclaim_pace``)
            dead_pending.append(name)
        rows = cast(
            list[_PendingRow],
            await r.xpending_range(
                stream, group, "-", "+", count, consumername=name, idle=min_idle_ms
            ),
        )
        if not rows:
            continue
        deliveries: dict[bytes, int] = {
            row["message_id"]: int(row["times_delivered"]) for row in rows
        }
        messages = cast(
            list[_Message], await r.xclaim(stream, group, me, min_idle_ms, list(deliveries))
        )
        for entry_id, fields in messages:
            if fields:
                claimed.append(Entry(stream.encode(), entry_id, fields, deliveries[entry_id] + 1))
        log.warning(
            "reclaimed entries of a dead consumer",
            extra={"stream": stream, "dead_consumer": name, "entries": len(messages)},
        )
    return claimed


async def own_pending(
    r: aioredis.Redis, stream: str | bytes, group: str, me: str, count: int = 1000
) -> list[tuple[bytes, int]]:
    """(id, times delivered) of every entry pending for this consumer, without delivering
    them again (XPENDING, not XREADGROUP: no delivery is counted)."""
    found: list[tuple[bytes, int]] = []
    start: bytes | str = "-"
    while True:
        rows = cast(
            list[_PendingRow],
            await r.xpending_range(stream, group, start, "+", count, consumername=me),
        )
        found.extend((row["message_id"], int(row["times_delivered"])) for row in rows)
        if len(rows) < count:
            return found
        start = b"(" + rows[-1]["message_id"]


def _text(value: str | bytes | None) -> str:
    if isinstance(value, bytes):
        return value.decode()
    return value or ""
