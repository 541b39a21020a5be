"""The gateway's atomic admission script (shared/lua/enqueue.lua) on a real
redis-server.

KEYS: the version's readiness set, the request stream, the request's admission record. ARGV: the
oldest readiness expiry (ms) that counts as live, max queue size (0: no limit), the encoded
header, the encoded request, how long to keep the admission record. Returns -1 when no live
worker serves the version, -2 when the queue is full, 1 after adding an entry with fields ``h``
and ``d`` (or when the same request id was admitted already: nothing is added twice).
"""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
import redis.exceptions

from shared import lua
from shared.fleet import readiness, streams
from shared.fleet.admission_script import admission_call
from shared.fleet.coalesced_script import CoalescedScript
from shared.runtime import clock
from shared.wire import envelope, keys
from shared.wire.envelope import InferRequest, RequestHeader, Tensor

MODEL, VERSION, PRIORITY = "simple", 1, 1
READY = keys.ready(MODEL, VERSION)
STREAM = keys.request_stream(MODEL, VERSION, PRIORITY)


# The script never reads the payload: a fixed time keeps the bytes comparable.
STAMP_MS = 1_700_000_000_000


def payload(n: int) -> tuple[bytes, bytes]:
    now = STAMP_MS
    header = RequestHeader(
        id=f"r{n}",
        reply_to=keys.reply_stream("gw"),
        deadline_ms=now + 10_000,
        priority=PRIORITY,
        batch_size=1,
        shape_sig="INPUT0:16",
        enqueued_ms=now,
    )
    request = InferRequest(
        id=f"r{n}",
        model=MODEL,
        version=VERSION,
        inputs=[Tensor("INPUT0", "INT32", [1, 16], bytes(64))],
        outputs=[],
        parameters={},
        reply_to=keys.reply_stream("gw"),
        deadline_ms=now + 10_000,
        enqueued_ms=now,
    )
    return envelope.encode(header), envelope.encode(request)


@pytest.fixture(params=["script", "coalesced"])
def enqueue(request: pytest.FixtureRequest, aredis: aioredis.Redis):
    """Every test runs against the plain script and the gateway's coalescing caller."""
    if request.param == "script":
        script = aredis.register_script(lua.ENQUEUE.source)
    else:
        script = CoalescedScript(aredis, lua.ENQUEUE.source)

    async def call(n: int = 0, max_queue: int = 0, now: int | None = None) -> int:
        header, data = payload(n)
        now = clock.now_ms() if now is None else now
        return int(
            await script(
                keys=[READY, STREAM, keys.admitted(MODEL, f"r{n}")],
                args=[now, max_queue, header, data, 10_000],
            )
        )

    return call


async def ready_worker(r: aioredis.Redis, ttl_ms: int = 60_000) -> None:
    await readiness.mark_ready(r, "worker-1", {(MODEL, VERSION): 1}, ttl_ms=ttl_ms)


# --- no live worker ------------------------------------------------------------------------------


async def test_no_worker_ever_is_refused(aredis: aioredis.Redis, enqueue) -> None:
    assert await enqueue() == -1
    assert await aredis.exists(STREAM) == 0


async def test_a_worker_whose_readiness_expired_is_not_live(
    aredis: aioredis.Redis, enqueue
) -> None:
    await ready_worker(aredis, ttl_ms=30)
    await asyncio.sleep(0.08)
    assert await enqueue() == -1
    assert await aredis.exists(STREAM) == 0


async def test_readiness_is_judged_at_the_callers_now(aredis: aioredis.Redis, enqueue) -> None:
    await ready_worker(aredis, ttl_ms=1_000)
    assert await enqueue(now=clock.now_ms() + 5_000) == -1
    assert await enqueue() == 1


async def test_a_worker_of_another_version_does_not_count(aredis: aioredis.Redis, enqueue) -> None:
    await readiness.mark_ready(aredis, "worker-1", {(MODEL, VERSION + 1): 1}, ttl_ms=60_000)
    assert await enqueue() == -1


# --- admitted ------------------------------------------------------------------------------------


async def test_admitted_request_is_one_entry_with_header_and_data(
    aredis: aioredis.Redis, enqueue
) -> None:
    await ready_worker(aredis)
    assert await enqueue(7) == 1
    [(_, fields)] = await aredis.xrange(STREAM)
    assert set(fields) == {keys.FIELD_HEADER, keys.FIELD_DATA}
    header, data = payload(7)
    assert fields[keys.FIELD_HEADER] == header
    assert envelope.decode_header(fields[keys.FIELD_HEADER]).id == "r7"
    assert envelope.decode_request(fields[keys.FIELD_DATA]).inputs[0].data == bytes(64)
    assert fields[keys.FIELD_DATA] == data


async def test_admitted_requests_keep_their_order(aredis: aioredis.Redis, enqueue) -> None:
    await ready_worker(aredis)
    for n in range(5):
        assert await enqueue(n) == 1
    ids = [envelope.decode_header(f[keys.FIELD_HEADER]).id for _, f in await aredis.xrange(STREAM)]
    assert ids == [f"r{n}" for n in range(5)]


async def test_admitted_entry_reaches_the_schedulers_group(aredis: aioredis.Redis, enqueue) -> None:
    await streams.ensure_group(aredis, STREAM, keys.SCHEDULER_GROUP)
    await ready_worker(aredis)
    assert await enqueue(1) == 1
    reply = await aredis.xreadgroup(keys.SCHEDULER_GROUP, "s", {STREAM: ">"}, count=10)
    [entry] = streams.parse_read(reply)
    assert envelope.decode_header(entry.fields[keys.FIELD_HEADER]).id == "r1"


async def test_max_queue_0_means_no_limit(aredis: aioredis.Redis, enqueue) -> None:
    await ready_worker(aredis)
    for n in range(50):
        assert await enqueue(n, max_queue=0) == 1
    assert await aredis.xlen(STREAM) == 50


# --- queue full ----------------------------------------------------------------------------------


async def test_full_queue_is_refused_at_max(aredis: aioredis.Redis, enqueue) -> None:
    await ready_worker(aredis)
    assert [await enqueue(n, max_queue=3) for n in range(5)] == [1, 1, 1, -2, -2]
    assert await aredis.xlen(STREAM) == 3


async def test_queue_over_max_is_refused(aredis: aioredis.Redis, enqueue) -> None:
    # The policy may have been lowered while entries were queued.
    await ready_worker(aredis)
    for n in range(4):
        await enqueue(n)
    assert await enqueue(9, max_queue=2) == -2
    assert await aredis.xlen(STREAM) == 4


async def test_space_frees_when_the_scheduler_deletes_entries(
    aredis: aioredis.Redis, enqueue
) -> None:
    await ready_worker(aredis)
    assert [await enqueue(n, max_queue=2) for n in range(3)] == [1, 1, -2]
    first_id, _ = (await aredis.xrange(STREAM, count=1))[0]
    await aredis.xdel(STREAM, first_id)  # what a dispatch does
    assert await enqueue(3, max_queue=2) == 1


async def test_no_worker_is_reported_before_a_full_queue(aredis: aioredis.Redis, enqueue) -> None:
    await ready_worker(aredis)
    await enqueue(0, max_queue=1)
    await readiness.unmark_ready(aredis, "worker-1", [(MODEL, VERSION)])
    assert await enqueue(1, max_queue=1) == -1


async def test_concurrent_admission_never_exceeds_max(aredis: aioredis.Redis, enqueue) -> None:
    await ready_worker(aredis)
    results = await asyncio.gather(*(enqueue(n, max_queue=10) for n in range(40)))
    assert sorted(results).count(1) == 10
    assert results.count(-2) == 30
    assert await aredis.xlen(STREAM) == 10


async def test_coalesced_calls_share_a_pipeline_and_survive_a_script_flush(aredis) -> None:
    await ready_worker(aredis)
    script = CoalescedScript(aredis, lua.ENQUEUE.source)
    await aredis.script_flush()  # the first pipeline meets NOSCRIPT and must recover
    results = await asyncio.gather(
        *(
            script(
                [READY, STREAM, keys.admitted(MODEL, f"r{n}")],
                [clock.now_ms(), 30, *payload(n), 10_000],
            )
            for n in range(40)
        )
    )
    assert sorted(results) == [-2] * 10 + [1] * 30
    assert await aredis.xlen(STREAM) == 30


async def test_the_calls_of_one_loop_turn_go_out_as_one_pipeline(aredis) -> None:
    """Requests that reach the admission in the same turn of the loop cost one write to Redis;
    a lone one later is sent on its own without waiting for company."""
    await ready_worker(aredis)
    script = CoalescedScript(aredis, lua.ENQUEUE.source)
    sizes: list[int] = []
    send = script._pipeline

    async def counted(batch):  # type: ignore[no-untyped-def]
        sizes.append(len(batch))
        return await send(batch)

    script._pipeline = counted  # type: ignore[method-assign]

    def call(n: int):  # type: ignore[no-untyped-def]
        return script(
            [READY, STREAM, keys.admitted(MODEL, f"t{n}")],
            [clock.now_ms(), 30, *payload(n), 10_000],
        )

    assert await asyncio.gather(*(call(n) for n in range(20))) == [1] * 20
    assert await call(20) == 1
    assert sizes == [20, 1]


# --- issue 12: generous liveness, idempotent admission -----------------------------------------


def _call(n: int, now: int, gone_ms: int, max_queue: int = 0):  # type: ignore[no-untyped-def]
    header, data = payload(n)
    return admission_call(
        model=MODEL,
        version=VERSION,
        priority=PRIORITY,
        request_id=f"r{n}",
        now_ms=now,
        deadline_ms=now + 10_000,
        gone_ms=gone_ms,
        max_queue_size=max_queue,
        header=header,
        data=data,
    )


async def test_a_late_heartbeat_queues_the_request_instead_of_refusing_it(
    aredis: aioredis.Redis,
) -> None:
    """A worker whose readiness expired 5 s ago (a frozen process, a starved machine) is late,
    not gone: the request waits for it and its deadline decides (before: 503 at once)."""
    script = aredis.register_script(lua.ENQUEUE.source)
    await ready_worker(aredis, ttl_ms=1_000)
    later = clock.now_ms() + 6_000
    call = _call(1, later, gone_ms=30_000)
    assert await script(keys=call.keys, args=call.args) == 1
    assert await aredis.xlen(STREAM) == 1


async def test_a_worker_gone_for_longer_than_the_bound_is_refused_at_once(
    aredis: aioredis.Redis,
) -> None:
    script = aredis.register_script(lua.ENQUEUE.source)
    await ready_worker(aredis, ttl_ms=1_000)
    much_later = clock.now_ms() + 40_000
    call = _call(1, much_later, gone_ms=30_000)
    assert await script(keys=call.keys, args=call.args) == -1
    assert await aredis.exists(STREAM) == 0


async def test_a_worker_that_left_cleanly_is_refused_at_once(aredis: aioredis.Redis) -> None:
    script = aredis.register_script(lua.ENQUEUE.source)
    await ready_worker(aredis)
    await readiness.unmark_ready(aredis, "worker-1", [(MODEL, VERSION)])
    call = _call(1, clock.now_ms(), gone_ms=30_000)
    assert await script(keys=call.keys, args=call.args) == -1


async def test_the_same_request_admitted_twice_is_queued_once(aredis: aioredis.Redis) -> None:
    """redis-py sends a pipeline again when the connection drops after it went out: the second
    admission of the same request id must not queue it again (before: two entries)."""
    script = aredis.register_script(lua.ENQUEUE.source)
    await ready_worker(aredis)
    call = _call(1, clock.now_ms(), gone_ms=30_000)
    assert await script(keys=call.keys, args=call.args) == 1
    assert await script(keys=call.keys, args=call.args) == 1
    assert await aredis.xlen(STREAM) == 1
    ttl = await aredis.pttl(keys.admitted(MODEL, "r1"))
    assert 0 < ttl <= 10_000  # kept until the request's deadline, then gone


async def test_a_failing_call_fails_alone_and_the_connection_stays_in_step(aredis) -> None:
    """One script error in a batch (here: a wrong number of arguments) is that caller's
    exception; the calls around it are answered, and so is the next batch on the connection."""
    await ready_worker(aredis)
    script = CoalescedScript(aredis, lua.ENQUEUE.source)

    def call(n: int, args: list[object] | None = None):  # type: ignore[no-untyped-def]
        return script(
            [READY, STREAM, keys.admitted(MODEL, f"e{n}")],
            args if args is not None else [clock.now_ms(), 30, *payload(n), 10_000],
        )

    results = await asyncio.gather(
        call(0), call(1, [clock.now_ms(), "not a number", b"h", b"d", 10_000]), call(2),
        return_exceptions=True,
    )  # fmt: skip
    assert results[0] == 1 and results[2] == 1
    assert isinstance(results[1], redis.exceptions.ResponseError)
    assert await asyncio.gather(call(3), call(4)) == [1, 1]
    assert await aredis.xlen(STREAM) == 4


async def test_a_batch_on_a_connection_redis_dropped_is_answered(aredis, redis_url) -> None:
    """Redis closed the pooled connection between two batches (a restart, a timeout): every
    caller of the next batch is answered (the pool reconnects; a connection that fails under
    the batch sends it again through redis-py's pipeline, whose retry reconnects)."""
    await ready_worker(aredis)
    script = CoalescedScript(aredis, lua.ENQUEUE.source)

    def call(n: int):  # type: ignore[no-untyped-def]
        return script(
            [READY, STREAM, keys.admitted(MODEL, f"k{n}")],
            [clock.now_ms(), 30, *payload(n), 10_000],
        )

    if redis_url.startswith("redis+cluster"):
        pytest.skip("a single Redis's connection (a cluster client keeps redis-py's pipeline)")
    assert await call(0) == 1
    # Every other client's connection, the pooled ones included (this command's own stays).
    killer = aioredis.Redis.from_url(redis_url)
    try:
        await killer.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    finally:
        await killer.aclose()
    assert await asyncio.gather(*(call(n) for n in range(1, 6))) == [1] * 5
    assert await aredis.xlen(STREAM) == 6
