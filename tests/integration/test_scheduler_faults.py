"""The scheduler under faults (issue 12, defects 1, 2, 3 and 11): a failed dispatch or expiry
orphans nothing, a read whose answer was lost is recovered, a malformed request entry is answered
and dead-lettered instead of staying pending forever, a frozen scheduler's late dispatch is
fenced off, and the queues of versions no longer served are removed.

Failures are real: Redis refusing writes (``maxmemory`` exceeded: OOM), a proxy dropping the
answer to a read that Redis already delivered.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis

from conch.private_redis import PrivateRedis
from scheduler.service import SchedulerService
from scheduler.settings import SchedulerSettings
from shared import metrics
from shared.fleet import model_registry, readiness
from shared.runtime import redis_conn
from shared.wire import envelope, keys
from shared.wire.envelope import InferRequest, RequestHeader, Tensor
from shared.wire.errors import ErrorCode
from tests.queue_harness import MODEL, VERSION, Harness, model_config
from tests.tcp_proxy import TcpProxy
from tests.waiting import eventually


@pytest.fixture
async def out_of_memory(aredis: aioredis.Redis) -> AsyncIterator[None]:
    """Redis refuses every write that needs memory until the test sets it back."""
    yield
    await aredis.config_set("maxmemory", 0)


async def refuse_writes(r: aioredis.Redis, refuse: bool) -> None:
    await r.config_set("maxmemory", 1 if refuse else 0)


# --- 1: a failed step keeps its requests ---------------------------------------------------------


async def test_a_failed_dispatch_keeps_its_requests(harness, aredis, out_of_memory) -> None:
    """Before: the requests left the queue's memory before the write that moves them; when it
    failed they stayed pending in Redis under a live scheduler that never read them again."""
    h = harness(model_config(max_batch_size=4))
    for rid in ("a", "b"):
        await h.submit(rid, add=False)
    h.start()
    await asyncio.sleep(0.05)
    await refuse_writes(aredis, True)
    for rid in ("a", "b"):
        h.hand(rid)  # the stream entries exist; the batch cannot be written
    await asyncio.sleep(0.3)  # several failed dispatches
    assert await h.batch_ids() == []
    await refuse_writes(aredis, False)
    assert await h.wait_batches(1) == [["a", "b"]]
    assert not await h.still_queued("a") and not await h.still_queued("b")


async def test_a_failed_expiry_answer_keeps_its_requests(harness, aredis, out_of_memory) -> None:
    """Before: expired requests were dropped from memory before their answer was written; when
    the write failed they were never answered and stayed pending."""
    h = harness(model_config(delay_us=10_000_000))
    await h.submit("doomed", deadline_in_ms=300)
    await refuse_writes(aredis, True)
    h.start()
    await asyncio.sleep(0.6)  # the deadline passed; the answer cannot be written
    assert await h.replies() == []
    await refuse_writes(aredis, False)
    [reply] = await h.wait_replies(1)
    assert (reply.id, reply.error_code) == ("doomed", ErrorCode.UNAVAILABLE.value)
    assert not await h.still_queued("doomed")
    assert len(h.queue) == 0


# --- 3: a late dispatch is fenced ----------------------------------------------------------------


async def test_a_frozen_schedulers_late_dispatch_sends_nothing(harness, aredis) -> None:
    """Another scheduler claimed the entries while this one was frozen: when it wakes up, its
    dispatch finds them no longer its own and sends nothing (before: both sent the requests)."""
    h = harness(model_config(max_batch_size=4))
    for rid in ("a", "b"):
        await h.submit(rid)
    stream, _ = h.entries["a"]
    ids = [h.entries[rid][1] for rid in ("a", "b")]
    await aredis.xclaim(stream, keys.SCHEDULER_GROUP, "scheduler-other", 0, ids)
    late = metrics.child(metrics.LATE_RESULTS_DROPPED, "scheduler", MODEL, VERSION)
    before = late._value.get()
    h.start()
    await eventually(lambda: _done(len(h.queue) == 0), lambda done: done)
    assert await h.batch_ids() == []
    assert len(h.queue) == 0  # dropped from memory: the entries are the other scheduler's
    assert late._value.get() - before == 2
    pending = await aredis.xpending_range(stream, keys.SCHEDULER_GROUP, "-", "+", 10)
    assert {row["consumer"] for row in pending} == {b"scheduler-other"}


async def _done(value: bool) -> bool:
    return value


# --- 10: a dispatch sent twice moves its requests once -------------------------------------------


async def test_a_dispatch_sent_twice_moves_its_requests_once(proxy: TcpProxy, aredis) -> None:
    """The connection drops after the dispatch went out and before its answer came back;
    redis-py sends it again. Before: the MULTI ran twice and the batch was queued twice (its
    requests executed twice)."""
    client = redis_conn.connect(proxy.url(), name="conch-scheduler")
    h = Harness(client, model_config(max_batch_size=4))
    try:
        for rid in ("dup-1", "dup-2"):
            await h.submit(rid)
        proxy.cut_after(b"dup-1")  # the dispatch carries the requests' payloads
        h.start()
        batches = await eventually(
            lambda: _batch_ids(aredis, h.queue.batch_stream), lambda b: len(b) >= 1
        )
        await asyncio.sleep(0.3)  # a second batch, if any, would be there by now
        assert proxy.cuts == 1
        assert await _batch_ids(aredis, h.queue.batch_stream) == batches == [["dup-1", "dup-2"]]
        assert len(h.queue) == 0
    finally:
        await h.stop()
        await client.aclose()


# --- the scheduler service: lost reads, malformed entries, retired queues ------------------------


def _request(rid: str, reply_to: str) -> tuple[bytes, bytes]:
    now = int(time.time() * 1000)
    header = RequestHeader(
        id=rid,
        reply_to=reply_to,
        deadline_ms=now + 30_000,
        priority=1,
        batch_size=1,
        shape_sig="INPUT0:16",
        enqueued_ms=now,
    )
    request = InferRequest(
        id=rid,
        model=MODEL,
        version=VERSION,
        inputs=[Tensor("INPUT0", "INT32", [1, 16], bytes(64))],
        outputs=[],
        parameters={},
        reply_to=reply_to,
        deadline_ms=now + 30_000,
        enqueued_ms=now,
    )
    return envelope.encode(header), envelope.encode(request)


@pytest.fixture
def proxy(redis_server: PrivateRedis, redis_url: str) -> Iterator[TcpProxy]:
    with TcpProxy.to_redis(redis_server) as running:
        yield running


class Service:
    """A scheduler service in this process, on the model of the queue tests, with one ready
    (pretend) worker."""

    def __init__(self, redis_url: str, **settings: object):
        self.settings = SchedulerSettings(
            redis_url=redis_url, health_port=0, refresh_interval_ms=50, **settings
        )
        self.service = SchedulerService(self.settings)
        self.task: asyncio.Task[None] | None = None

    async def start(self, r: aioredis.Redis) -> None:
        await model_registry.publish_model(r, model_config(max_batch_size=4))
        await readiness.mark_ready(r, "worker-1", {(MODEL, VERSION): 1}, ttl_ms=60_000)
        self.task = asyncio.create_task(self.service.run())
        ready = await eventually(
            lambda: _done((MODEL, VERSION) in self.service.queues), lambda x: x, within=10
        )
        assert ready, "the scheduler never created the queue"

    async def stop(self) -> None:
        if self.task is not None:
            while not self.task.done():
                self.task.cancel()
                await asyncio.wait({self.task}, timeout=0.5)


@pytest.fixture
async def service() -> AsyncIterator[list[Service]]:
    made: list[Service] = []
    yield made
    for s in made:
        await s.stop()


STREAM = keys.request_stream(MODEL, VERSION, 1)
BATCHES = keys.batch_stream(MODEL, VERSION)
REPLIES = keys.reply_stream("faults")


async def _batch_ids(r: aioredis.Redis, stream: str | None = None) -> list[list[str]]:
    rows = await r.xrange(stream or BATCHES)
    return [
        [envelope.decode_request(raw).id for raw in envelope.decode_batch(f[b"d"]).requests]
        for _, f in rows
    ]


async def test_a_read_whose_answer_was_lost_is_recovered(
    service, proxy: TcpProxy, aredis: aioredis.Redis
) -> None:
    """Redis delivered the entry to this scheduler (it is pending under it) but the answer never
    arrived. Before: redis-py read again past it, and the request stayed pending for good."""
    s = Service(proxy.url())
    service.append(s)
    await s.start(aredis)
    proxy.drop_reply_containing(b"lost-on-the-way")
    header, data = _request("lost-on-the-way", REPLIES)
    await aredis.xadd(STREAM, {keys.FIELD_HEADER: header, keys.FIELD_DATA: data})
    batches = await eventually(lambda: _batch_ids(aredis), lambda b: len(b) >= 1, within=10)
    assert proxy.cuts == 1
    assert batches == [["lost-on-the-way"]]
    assert await aredis.xlen(STREAM) == 0


async def test_a_malformed_header_is_answered_and_dead_lettered(
    service, aredis: aioredis.Redis
) -> None:
    """Before: the entry was logged and left pending forever (and counted by XLEN: a phantom
    'queue full'); its caller waited for its deadline."""
    s = Service(_url(aredis))
    service.append(s)
    await s.start(aredis)
    _, data = _request("garbled", REPLIES)
    entry_id = await aredis.xadd(STREAM, {keys.FIELD_HEADER: b"\xc1junk", keys.FIELD_DATA: data})
    replies = await eventually(lambda: aredis.xrange(REPLIES), lambda r: len(r) >= 1, within=10)
    [reply] = envelope.decode_replies(replies[0][1][keys.FIELD_DATA])
    assert (reply.id, reply.error_code) == ("garbled", "INTERNAL")
    assert "malformed request header" in reply.error
    dead = await eventually(
        lambda: aredis.xrange(keys.dead_letters(MODEL)), lambda d: len(d) >= 1, within=5
    )
    [(_, fields)] = dead
    assert fields[b"entry"] == entry_id
    assert fields[b"d"] == data
    assert b"malformed request header" in fields[b"reason"]
    assert await aredis.xlen(STREAM) == 0
    assert (await aredis.xpending(STREAM, keys.SCHEDULER_GROUP))["pending"] == 0


async def test_the_queue_of_a_version_no_longer_served_is_removed(
    service, aredis: aioredis.Redis
) -> None:
    """Before: the queue, its task and its read streams stayed for the life of the process."""
    s = Service(_url(aredis), retire_after_ms=100)
    service.append(s)
    await s.start(aredis)
    # The repository API's unload removes the version from the model's version set.
    await readiness.unmark_ready(aredis, "worker-1", [(MODEL, VERSION)])
    await aredis.srem(keys.model_versions(MODEL), VERSION)
    gone = await eventually(
        lambda: _done((MODEL, VERSION) not in s.service.queues), lambda x: x, within=5
    )
    assert gone
    assert STREAM.encode() not in s.service._streams


def _url(r: aioredis.Redis) -> str:
    kwargs = r.connection_pool.connection_kwargs
    if "path" in kwargs:
        return f"unix://{kwargs['path']}?db={kwargs.get('db', 0)}"
    return f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"
