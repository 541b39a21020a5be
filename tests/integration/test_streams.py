"""Stream helpers against a real redis-server: group creation and reclaiming a dead consumer's work.

Delivery is at-least-once: entries stay pending until acked, a live consumer takes over only the
entries of consumers that are no longer live, and every reclaim counts as one more delivery.
"""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from shared.fleet import streams

STREAM = "conch:test:stream"
GROUP = "workers"


def text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def consumers(r: aioredis.Redis) -> dict[str, int]:
    """Consumer name -> pending count."""
    rows = await r.xinfo_consumers(STREAM, GROUP)
    return {text(row["name"]): int(row["pending"]) for row in rows}


async def pending_of(r: aioredis.Redis, consumer: str) -> dict[bytes, int]:
    """Entry id -> times delivered, for one consumer."""
    rows = await r.xpending_range(STREAM, GROUP, "-", "+", 1000, consumername=consumer)
    return {row["message_id"]: int(row["times_delivered"]) for row in rows}


async def deliver(r: aioredis.Redis, consumer: str, *values: str) -> list[bytes]:
    """Add entries and have ``consumer`` read them, leaving them pending on it."""
    ids = [await r.xadd(STREAM, {b"v": v.encode()}) for v in values]
    reply = await r.xreadgroup(GROUP, consumer, {STREAM: ">"}, count=len(values))
    read = streams.parse_read(reply)
    assert [e.entry_id for e in read] == ids
    return ids


# --- ensure_group -------------------------------------------------------------------------------


async def test_ensure_group_creates_the_stream_and_the_group(aredis: aioredis.Redis) -> None:
    await streams.ensure_group(aredis, STREAM, GROUP)
    assert await aredis.exists(STREAM) == 1
    groups = await aredis.xinfo_groups(STREAM)
    assert [text(g["name"]) for g in groups] == [GROUP]


async def test_ensure_group_starts_at_the_beginning_of_an_existing_stream(
    aredis: aioredis.Redis,
) -> None:
    # Requests enqueued before the first scheduler started must not be skipped.
    early = await aredis.xadd(STREAM, {b"v": b"early"})
    await streams.ensure_group(aredis, STREAM, GROUP)
    read = streams.parse_read(await aredis.xreadgroup(GROUP, "c1", {STREAM: ">"}, count=10))
    assert [e.entry_id for e in read] == [early]
    assert read[0].fields == {b"v": b"early"}
    assert read[0].deliveries == 1


async def test_ensure_group_is_idempotent_and_keeps_the_groups_position(
    aredis: aioredis.Redis,
) -> None:
    await streams.ensure_group(aredis, STREAM, GROUP)
    await deliver(aredis, "c1", "a")
    await streams.ensure_group(aredis, STREAM, GROUP)  # BUSYGROUP: tolerated, nothing reset
    assert await pending_of(aredis, "c1") != {}
    again = await aredis.xreadgroup(GROUP, "c2", {STREAM: ">"}, count=10)
    assert streams.parse_read(again) == []


async def test_ensure_group_raises_every_other_error(aredis: aioredis.Redis) -> None:
    await aredis.set(STREAM, b"not a stream")
    with pytest.raises(ResponseError) as exc_info:
        await streams.ensure_group(aredis, STREAM, GROUP)
    assert "BUSYGROUP" not in str(exc_info.value)


async def test_ensure_groups_creates_one_group_per_stream(aredis: aioredis.Redis) -> None:
    names = [f"{STREAM}:{i}" for i in range(3)]
    await streams.ensure_groups(aredis, names, GROUP)
    await streams.ensure_groups(aredis, names, GROUP)
    for name in names:
        assert [text(g["name"]) for g in await aredis.xinfo_groups(name)] == [GROUP]


# --- parse_read ---------------------------------------------------------------------------------


async def test_parse_read_flattens_several_streams(aredis: aioredis.Redis) -> None:
    other = f"{STREAM}:other"
    await streams.ensure_groups(aredis, [STREAM, other], GROUP)
    a = await aredis.xadd(STREAM, {b"v": b"1"})
    b = await aredis.xadd(other, {b"v": b"2"})
    reply = await aredis.xreadgroup(GROUP, "c", {STREAM: ">", other: ">"}, count=10)
    entries = streams.parse_read(reply)
    assert {(e.stream, e.entry_id) for e in entries} == {(STREAM.encode(), a), (other.encode(), b)}
    assert streams.parse_read(None) == []
    assert streams.parse_read([]) == []


async def test_parse_read_skips_entries_deleted_while_pending(aredis: aioredis.Redis) -> None:
    await streams.ensure_group(aredis, STREAM, GROUP)
    kept, gone = await deliver(aredis, "c", "keep", "gone")
    await aredis.xdel(STREAM, gone)
    # Re-reading this consumer's own history returns the deleted entry with no fields.
    history = await aredis.xreadgroup(GROUP, "c", {STREAM: "0"}, count=10)
    assert [e.entry_id for e in streams.parse_read(history)] == [kept]


# --- reclaim_dead -------------------------------------------------------------------------------


async def test_reclaim_takes_over_the_entries_of_a_dead_consumer(aredis: aioredis.Redis) -> None:
    await streams.ensure_group(aredis, STREAM, GROUP)
    ids = await deliver(aredis, "dead", "a", "b", "c")
    claimed = await streams.reclaim_dead(aredis, STREAM, GROUP, "me", live={"me"}, min_idle_ms=0)
    assert [e.entry_id for e in claimed] == ids
    assert [e.fields for e in claimed] == [{b"v": b"a"}, {b"v": b"b"}, {b"v": b"c"}]
    assert all(e.stream == STREAM.encode() for e in claimed)
    assert await pending_of(aredis, "me") == dict.fromkeys(ids, 2)
    assert await pending_of(aredis, "dead") == {}


async def test_reclaim_counts_every_delivery(aredis: aioredis.Redis) -> None:
    await streams.ensure_group(aredis, STREAM, GROUP)
    [entry_id] = await deliver(aredis, "first", "x")
    [once] = await streams.reclaim_dead(aredis, STREAM, GROUP, "second", live=set(), min_idle_ms=0)
    assert once.deliveries == 2
    # The second consumer dies too; a third takes over and sees the third delivery.
    [twice] = await streams.reclaim_dead(aredis, STREAM, GROUP, "third", live=set(), min_idle_ms=0)
    assert twice.entry_id == entry_id
    assert twice.deliveries == 3
    assert await pending_of(aredis, "third") == {entry_id: 3}


async def test_reclaim_leaves_live_consumers_alone(aredis: aioredis.Redis) -> None:
    await streams.ensure_group(aredis, STREAM, GROUP)
    busy = await deliver(aredis, "busy", "slow")
    dead = await deliver(aredis, "dead", "orphan")
    claimed = await streams.reclaim_dead(
        aredis, STREAM, GROUP, "me", live={"me", "busy"}, min_idle_ms=0
    )
    assert [e.entry_id for e in claimed] == dead
    assert await pending_of(aredis, "busy") == dict.fromkeys(busy, 1)


async def test_reclaim_never_takes_from_itself(aredis: aioredis.Redis) -> None:
    # "me" is not in ``live`` (its heartbeat may lag), yet its own entries stay as they are.
    await streams.ensure_group(aredis, STREAM, GROUP)
    mine = await deliver(aredis, "me", "mine")
    assert await streams.reclaim_dead(aredis, STREAM, GROUP, "me", live=set(), min_idle_ms=0) == []
    assert await pending_of(aredis, "me") == dict.fromkeys(mine, 1)
    assert "me" in await consumers(aredis)


async def test_reclaim_deletes_dead_consumers_with_nothing_pending(aredis: aioredis.Redis) -> None:
    await streams.ensure_group(aredis, STREAM, GROUP)
    [done] = await deliver(aredis, "finished", "x")
    await aredis.xack(STREAM, GROUP, done)
    await deliver(aredis, "idle-live", "y")
    await aredis.xack(STREAM, GROUP, *await pending_of(aredis, "idle-live"))
    assert (
        await streams.reclaim_dead(aredis, STREAM, GROUP, "me", live={"idle-live"}, min_idle_ms=0)
        == []
    )
    remaining = await consumers(aredis)
    assert "finished" not in remaining
    assert remaining["idle-live"] == 0  # live consumers are kept even when idle


async def test_reclaim_follows_count_across_calls(aredis: aioredis.Redis) -> None:
    await streams.ensure_group(aredis, STREAM, GROUP)
    ids = await deliver(aredis, "dead", "a", "b", "c")
    first = await streams.reclaim_dead(
        aredis, STREAM, GROUP, "me", live=set(), count=2, min_idle_ms=0
    )
    assert [e.entry_id for e in first] == ids[:2]
    second = await streams.reclaim_dead(
        aredis, STREAM, GROUP, "me", live=set(), count=2, min_idle_ms=0
    )
    assert [e.entry_id for e in second] == ids[2:]
    # Now empty, the dead consumer is removed on the next pass.
    assert (
        await streams.reclaim_dead(aredis, STREAM, GROUP, "me", live=set(), count=2, min_idle_ms=0)
        == []
    )
    assert "dead" not in await consumers(aredis)


async def test_reclaim_acks_entries_deleted_while_pending(aredis: aioredis.Redis) -> None:
    # The dead consumer finished an entry (published + deleted) but died before acking it.
    await streams.ensure_group(aredis, STREAM, GROUP)
    kept, gone = await deliver(aredis, "dead", "kept", "gone")
    await aredis.xdel(STREAM, gone)
    claimed = await streams.reclaim_dead(aredis, STREAM, GROUP, "me", live=set(), min_idle_ms=0)
    assert [e.entry_id for e in claimed] == [kept]
    assert await pending_of(aredis, "me") == {kept: 2}
    summary = await aredis.xpending(STREAM, GROUP)
    assert summary["pending"] == 1  # nothing left pending for the deleted entry


async def test_reclaim_from_several_dead_consumers(aredis: aioredis.Redis) -> None:
    await streams.ensure_group(aredis, STREAM, GROUP)
    a = await deliver(aredis, "dead-a", "1", "2")
    b = await deliver(aredis, "dead-b", "3")
    claimed = await streams.reclaim_dead(aredis, STREAM, GROUP, "me", live={"me"}, min_idle_ms=0)
    assert sorted(e.entry_id for e in claimed) == sorted(a + b)
    assert set(await consumers(aredis)) >= {"me"}
    assert await pending_of(aredis, "me") == dict.fromkeys(a + b, 2)


async def test_reclaimed_entry_is_not_delivered_to_new_readers(aredis: aioredis.Redis) -> None:
    await streams.ensure_group(aredis, STREAM, GROUP)
    await deliver(aredis, "dead", "x")
    await streams.reclaim_dead(aredis, STREAM, GROUP, "me", live=set(), min_idle_ms=0)
    fresh = await aredis.xreadgroup(GROUP, "other", {STREAM: ">"}, count=10)
    assert streams.parse_read(fresh) == []


async def test_reclaim_on_a_missing_stream_or_group_finds_nothing(aredis: aioredis.Redis) -> None:
    assert (
        await streams.reclaim_dead(aredis, "conch:test:nothing", GROUP, "me", set(), min_idle_ms=0)
        == []
    )
    await streams.ensure_group(aredis, STREAM, GROUP)
    assert (
        await streams.reclaim_dead(aredis, STREAM, "no-such-group", "me", set(), min_idle_ms=0)
        == []
    )


async def test_reclaim_works_with_a_decoding_client(redis_url: str) -> None:
    r = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        await streams.ensure_group(r, STREAM, GROUP)
        await r.xadd(STREAM, {"v": "x"})
        await r.xreadgroup(GROUP, "dead", {STREAM: ">"}, count=1)
        [entry] = await streams.reclaim_dead(r, STREAM, GROUP, "me", live=set(), min_idle_ms=0)
        assert entry.deliveries == 2
    finally:
        await r.aclose()


# --- issue 12: claims are bounded and exclusive -------------------------------------------------


async def test_entries_idle_less_than_the_bound_are_not_claimed(aredis: aioredis.Redis) -> None:
    """A consumer that merely looks dead (a frozen process, a late heartbeat) keeps the entries
    it read less than the dead bound ago."""
    await streams.ensure_group(aredis, STREAM, GROUP)
    await deliver(aredis, "frozen", "x")
    claimed = await streams.reclaim_dead(aredis, STREAM, GROUP, "me", set(), min_idle_ms=60_000)
    assert claimed == []
    assert len(await pending_of(aredis, "frozen")) == 1


async def test_two_reclaimers_never_both_take_an_entry(aredis: aioredis.Redis) -> None:
    """Before: XCLAIM with min-idle 0, so a second reclaimer (or the same pass of another
    process) took the entries again, and both ran them."""
    await streams.ensure_group(aredis, STREAM, GROUP)
    ids = await deliver(aredis, "dead", "a", "b")
    await asyncio.sleep(0.06)
    first = await streams.reclaim_dead(aredis, STREAM, GROUP, "one", set(), min_idle_ms=50)
    second = await streams.reclaim_dead(aredis, STREAM, GROUP, "two", {"one"}, min_idle_ms=50)
    assert [e.entry_id for e in first] == ids
    assert second == []
    # Even when "two" thinks "one" is dead as well: the entries were claimed a moment ago.
    third = await streams.reclaim_dead(aredis, STREAM, GROUP, "two", set(), min_idle_ms=50)
    assert third == []
    assert await pending_of(aredis, "one") == dict.fromkeys(ids, 2)
