"""The worker under faults (issue 12, defects 2, 3, 5 and 6): a poison batch is answered and
dead-lettered instead of looping, a late owner's ack is fenced off, heartbeats go on while the
event loop is blocked, an instance is never unloaded while it executes, and a batch whose read
answer was lost is recovered."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis

from conch.private_redis import PrivateRedis
from shared import metrics
from shared.runtime import clock
from shared.wire import keys
from tests.tcp_proxy import TcpProxy
from tests.waiting import eventually
from tests.worker_harness import (
    BATCHES,
    MODEL,
    VERSION,
    RunningWorker,
    batch,
    replies,
    write_repository,
)
from workers.batches.batch_loop import BatchLoop


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    return write_repository(tmp_path / "repo")


@pytest.fixture
async def workers() -> AsyncIterator[list[RunningWorker]]:
    started: list[RunningWorker] = []
    yield started
    for worker in started:
        await worker.stop()


async def start(workers: list[RunningWorker], url: str, repo: Path, **settings) -> RunningWorker:
    worker = RunningWorker(url, repo, **settings)
    workers.append(worker)
    await worker.start()
    return worker


def _url(r: aioredis.Redis) -> str:
    kwargs = r.connection_pool.connection_kwargs
    if "path" in kwargs:
        return f"unix://{kwargs['path']}?db={kwargs.get('db', 0)}"
    return f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"


async def _pending(r: aioredis.Redis) -> int:
    return int((await r.xpending(BATCHES, keys.WORKER_GROUP))["pending"])


# --- 2: poison batches ---------------------------------------------------------------------------


async def test_an_undecodable_batch_is_dead_lettered_at_once(workers, repository, aredis) -> None:
    """Before: decoding failed before the delivery count was checked, and the batch was tried
    again every 0.2 s for ever, pinning an instance."""
    worker = await start(workers, _url(aredis), repository)
    entry_id = await aredis.xadd(BATCHES, {keys.FIELD_DATA: b"\xc1 not a batch"})
    dead = await eventually(
        lambda: aredis.xrange(keys.dead_letters(MODEL)), lambda d: len(d) == 1, within=5
    )
    [(_, fields)] = dead
    assert fields[b"entry"] == entry_id
    assert fields[b"d"] == b"\xc1 not a batch"
    assert fields[b"reason"] == b"batch could not be decoded"
    assert await aredis.xlen(BATCHES) == 0 and await _pending(aredis) == 0
    assert worker.backend.executed == []
    # The instance is free again: the next batch runs.
    await aredis.xadd(BATCHES, {keys.FIELD_DATA: batch("after")})
    got = await eventually(lambda: replies(aredis), lambda r: len(r) == 1, within=5.0)
    assert [(r.id, r.error_code) for r in got] == [("after", "")]


async def test_a_batch_that_keeps_failing_is_answered_and_dead_lettered(
    workers, repository, aredis
) -> None:
    worker = await start(workers, _url(aredis), repository, max_deliveries=2)
    worker.backend.fail = True
    await aredis.xadd(BATCHES, {keys.FIELD_DATA: batch("x", "y")})
    got = await eventually(lambda: replies(aredis), lambda r: len(r) == 2, within=10)
    assert sorted(r.id for r in got) == ["x", "y"]
    assert all(r.error_code == "INTERNAL" for r in got)
    assert all("dead-letter" in r.error for r in got)
    dead = await aredis.xrange(keys.dead_letters(MODEL))
    assert len(dead) == 1 and b"giving up after 2" in dead[0][1][b"reason"]
    assert worker.backend.executed == ["x", "y", "x", "y"]  # two deliveries, then no more
    assert await _pending(aredis) == 0
    stats = await aredis.hgetall(keys.stats(MODEL, VERSION))
    assert stats[b"fail_count"] == b"2"


# --- 3: a late owner's ack is fenced; heartbeats off the event loop ------------------------------


async def test_a_late_owners_ack_and_statistics_are_dropped(workers, repository, aredis) -> None:
    """The batch was claimed by another worker while this one executed it (frozen past the dead
    bound): this one's ack and statistics are refused. Before: it acked and deleted the batch
    another worker owned, and the statistics counted the execution twice."""
    worker = await start(workers, _url(aredis), repository)
    late = metrics.child(metrics.LATE_RESULTS_DROPPED, "worker", MODEL, VERSION)
    before = late._value.get()
    worker.backend.gate.clear()
    entry_id = await aredis.xadd(BATCHES, {keys.FIELD_DATA: batch("claimed")})
    assert await asyncio.to_thread(worker.backend.entered.wait, 5)
    await aredis.xclaim(BATCHES, keys.WORKER_GROUP, "worker-other", 0, [entry_id])
    worker.backend.gate.set()
    await eventually(lambda: _late(late, before), lambda n: n >= 1, within=5.0)
    assert late._value.get() - before == 1
    rows = await aredis.xpending_range(BATCHES, keys.WORKER_GROUP, "-", "+", 10)
    assert [(r["message_id"], r["consumer"]) for r in rows] == [(entry_id, b"worker-other")]
    assert await aredis.xlen(BATCHES) == 1
    assert b"execution_count" not in await aredis.hgetall(keys.stats(MODEL, VERSION))


async def _late(counter, before: float) -> float:  # type: ignore[no-untyped-def]
    return counter._value.get() - before


async def test_heartbeats_go_on_while_the_event_loop_is_blocked(
    workers, repository, aredis, redis_url: str
) -> None:
    """Before: the heartbeat was a task on the event loop; a loop blocked longer than the TTL
    (a long call holding the GIL, a starved machine) made a live worker look dead."""
    worker = await start(
        workers, _url(aredis), repository, heartbeat_ttl_ms=600, heartbeat_interval_ms=100
    )
    check = redis.Redis.from_url(redis_url)
    try:
        time.sleep(1.5)  # noqa: ASYNC251 - the whole event loop stands still, past the TTL
        score = check.zscore(keys.service_registry("worker"), worker.service.id)
        ready = check.zscore(keys.ready(MODEL, VERSION), worker.service.id)
        now = clock.now_ms()
    finally:
        check.close()
    assert score is not None and score > now, "the worker's heartbeat expired"
    assert ready is not None and ready > now, "the worker's readiness expired"


# --- 6: unload waits for executing batches -------------------------------------------------------


async def test_an_instance_is_unloaded_only_once_its_batch_has_run(
    workers, repository, aredis
) -> None:
    """Before: unloading cancelled the serving task after the drain timeout and unloaded the
    instance while ``execute`` still ran on its thread (a use-after-free with CUDA/TensorRT)."""
    worker = await start(workers, _url(aredis), repository, drain_timeout_s=0.3)
    worker.backend.gate.clear()
    await aredis.xadd(BATCHES, {keys.FIELD_DATA: batch("in-flight")})
    assert await asyncio.to_thread(worker.backend.entered.wait, 5)
    stopping = asyncio.create_task(worker.service.versions.stop((MODEL, VERSION)))
    await asyncio.sleep(1.0)  # well past the drain timeout
    assert worker.backend.unloads == 0
    worker.backend.gate.set()
    await asyncio.wait_for(stopping, 10)
    assert worker.backend.unloads == 1
    assert not worker.backend.unloaded_while_running
    got = await eventually(lambda: replies(aredis), lambda r: len(r) == 1, within=5.0)
    assert [(r.id, r.error_code) for r in got] == [("in-flight", "")]


# --- 5 and 1 for workers: a lost read is recovered -----------------------------------------------


@pytest.fixture
def proxy(redis_server: PrivateRedis, redis_url: str) -> Iterator[TcpProxy]:
    with TcpProxy.to_redis(redis_server) as running:
        yield running


async def test_a_batch_whose_read_answer_was_lost_is_recovered(
    workers, repository, aredis, proxy: TcpProxy
) -> None:
    """Redis delivered the batch to this worker, the answer never arrived. Before: redis-py read
    again past it, and the batch stayed pending under a live worker that never ran it."""
    await start(workers, proxy.url(), repository)
    proxy.drop_reply_containing(b"lost-batch")
    await aredis.xadd(BATCHES, {keys.FIELD_DATA: batch("lost-batch")})
    got = await eventually(lambda: replies(aredis), lambda r: len(r) == 1, within=10)
    assert proxy.cuts == 1
    assert [(r.id, r.error_code) for r in got] == [("lost-batch", "")]
    assert await _pending(aredis) == 0


class _PublishFailsOnce:
    """The worker's batch client, whose next pipeline fails with a connection error before a
    byte is sent once ``armed`` (a Redis restarting between the execution and the ack)."""

    def __init__(self, real: aioredis.Redis):
        self.real = real
        self.armed = False

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.real, name)

    def pipeline(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        pipe = self.real.pipeline(*args, **kwargs)
        if self.armed:
            self.armed = False

            async def refused(*_a, **_k):  # type: ignore[no-untyped-def]
                raise redis.exceptions.ConnectionError("Connection refused (injected)")

            pipe.execute = refused  # type: ignore[method-assign]
        return pipe


async def test_a_batch_that_ran_is_not_run_again_when_its_ack_meets_a_redis_outage(
    workers, repository, aredis
) -> None:
    """The batch executed; Redis was restarting when its replies and ack went out. Before: the
    failed write sent the batch back to the loop, which found it still pending for itself and
    executed it again (seen twice in the 100,000-request soak, both at a Redis restart). Now the
    replies and ack are retried, the execution never. They ride on the loop's next read (one
    write); here that write fails, and so does the first try of sending them alone through the
    pool: the batch is answered, acked and executed once."""
    worker = await start(workers, _url(aredis), repository)
    client = _PublishFailsOnce(worker.service._batches._redis)
    worker.service._batches._redis = client  # type: ignore[assignment]
    real = BatchLoop._send_and_read
    failed: list[str] = []

    async def fails_once(self, client_, outcome, *args):  # type: ignore[no-untyped-def]
        if not failed:
            failed.append(outcome.entry.entry_id.decode())
            client.armed = True  # the pool's first try fails as well
            raise redis.exceptions.ConnectionError("Connection reset (injected)")
        return await real(self, client_, outcome, *args)

    BatchLoop._send_and_read = fails_once  # type: ignore[method-assign]
    try:
        await aredis.xadd(BATCHES, {keys.FIELD_DATA: batch("rides-with-read")})
        got = await eventually(lambda: replies(aredis), lambda r: len(r) >= 1, within=10)
        assert [(r.id, r.error_code) for r in got] == [("rides-with-read", "")]
        assert await eventually(lambda: _pending(aredis), lambda n: n == 0, within=10) == 0
        assert len(failed) == 1 and not client.armed  # both faults were met
        await aredis.xadd(BATCHES, {keys.FIELD_DATA: batch("next")})
        got = await eventually(lambda: replies(aredis), lambda r: len(r) >= 2, within=10)
        assert [r.id for r in got] == ["rides-with-read", "next"]
        await asyncio.sleep(1.0)  # time for a second execution, if one were coming
        assert worker.backend.executed == ["rides-with-read", "next"]
        stats = await aredis.hgetall(keys.stats(MODEL, VERSION))
        assert stats[b"execution_count"] == b"2"
    finally:
        BatchLoop._send_and_read = real  # type: ignore[method-assign]
