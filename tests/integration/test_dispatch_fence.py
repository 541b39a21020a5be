"""The dispatch script's fence against a real Redis: a batch goes only when every request entry
it names is still pending for this scheduler, whatever the order of the ids and whatever else
this scheduler holds between them (``shared/lua/dispatch.lua`` reads ownership with one
XPENDING range per stream and asks about the ids that range did not list one by one)."""

from __future__ import annotations

from shared import lua
from shared.fleet.fencing import dispatch_args
from shared.wire import keys

ME = "scheduler-me"
BATCH_STREAM = "{fence}:batch:1"
STREAMS = [b"{fence}:req:1:p1", b"{fence}:req:1:p2"]


async def _queued(aredis, stream: bytes, count: int) -> list[bytes]:
    """``count`` request entries read by this scheduler (pending under it), in stream order."""
    await aredis.xgroup_create(stream, keys.SCHEDULER_GROUP, id="0", mkstream=True)
    for i in range(count):
        await aredis.xadd(stream, {"h": b"header", "d": f"payload {i}".encode()})
    [[_, entries]] = await aredis.xreadgroup(keys.SCHEDULER_GROUP, ME, {stream: ">"})
    return [entry_id for entry_id, _ in entries]


async def _dispatch(aredis, ids_by_stream: dict[bytes, list[bytes]]) -> list:
    script_keys, args = dispatch_args(BATCH_STREAM, ME, b"the batch", ids_by_stream)
    return await aredis.eval(lua.DISPATCH.source, len(script_keys), *script_keys, *args)


async def _pending(aredis, stream: bytes) -> dict[bytes, bytes]:
    rows = await aredis.xpending_range(stream, keys.SCHEDULER_GROUP, "-", "+", 100)
    return {row["message_id"]: row["consumer"] for row in rows}


async def test_ids_out_of_stream_order_are_dispatched(aredis) -> None:
    ids = await _queued(aredis, STREAMS[0], 5)
    assert await _dispatch(aredis, {STREAMS[0]: list(reversed(ids))}) == [1]
    assert await aredis.xlen(STREAMS[0]) == 0
    assert await _pending(aredis, STREAMS[0]) == {}
    [(_, fields)] = await aredis.xrange(BATCH_STREAM)
    assert fields == {b"d": b"the batch"}


async def test_entries_held_between_the_chosen_ones_stay_queued(aredis) -> None:
    ids = await _queued(aredis, STREAMS[0], 6)
    chosen, kept = ids[::2], ids[1::2]
    assert await _dispatch(aredis, {STREAMS[0]: chosen}) == [1]
    assert set(await _pending(aredis, STREAMS[0])) == set(kept)
    assert [entry_id for entry_id, _ in await aredis.xrange(STREAMS[0])] == kept


async def test_an_entry_claimed_by_another_scheduler_is_named_and_nothing_is_sent(aredis) -> None:
    first = await _queued(aredis, STREAMS[0], 4)
    second = await _queued(aredis, STREAMS[1], 3)
    await aredis.xclaim(STREAMS[0], keys.SCHEDULER_GROUP, "scheduler-other", 0, [first[1]])
    await aredis.xclaim(STREAMS[1], keys.SCHEDULER_GROUP, "scheduler-other", 0, [second[2]])
    answer = await _dispatch(aredis, {STREAMS[0]: first, STREAMS[1]: second})
    assert answer == [-1, 1, first[1], 2, second[2]]
    assert await aredis.xlen(BATCH_STREAM) == 0
    assert await aredis.xlen(STREAMS[0]) == 4 and await aredis.xlen(STREAMS[1]) == 3
    assert len(await _pending(aredis, STREAMS[0])) == 4


async def test_an_entry_already_dispatched_fails_a_second_dispatch(aredis) -> None:
    """The same dispatch sent twice (a retried pipeline): the second finds its entries gone."""
    ids = await _queued(aredis, STREAMS[0], 3)
    assert await _dispatch(aredis, {STREAMS[0]: ids}) == [1]
    answer = await _dispatch(aredis, {STREAMS[0]: ids})
    assert answer[0] == -1 and sorted(answer[2::2]) == sorted(ids)
    assert await aredis.xlen(BATCH_STREAM) == 1
