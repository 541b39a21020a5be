"""The BLS client of a Python model process against a real Redis: a call is a request of the
called model's queue, with the calling batch's priority, tenant and deadline (an explicit
``timeout`` only shortens it); no ready version is an error response, never an exception."""

from __future__ import annotations

import time

import numpy as np
import redis

from shared.fleet import model_registry, readiness
from shared.model_config import parse_pbtxt
from shared.runtime import clock
from shared.wire import envelope, keys
from shared.wire.errors import ErrorCode
from tests.waiting import eventually_sync
from workers.python.bls_caller import Caller, batch_caller
from workers.python.bls_client import BlsClient, BlsSettings

CONFIG = """\
name: "target"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { priority_levels: 3 default_priority_level: 3 }
"""


async def _publish(url: str) -> None:
    import redis.asyncio as aioredis

    r = aioredis.Redis.from_url(url)
    try:
        await model_registry.publish_model(r, parse_pbtxt(CONFIG, "target/config.pbtxt"))
        await readiness.mark_ready(r, "worker-1", {("target", 1): 1}, 60_000)
    finally:
        await r.aclose()


def test_a_call_is_queued_with_the_callers_priority_tenant_and_deadline(redis_url: str) -> None:
    import asyncio

    asyncio.run(_publish(redis_url))
    # The queue itself: with the direct path on, an idle model takes the call at once (below).
    client = BlsClient(BlsSettings(redis_url=redis_url, direct_path=False))
    deadline = clock.now_ms() + 5_000
    caller = batch_caller(
        [Caller(deadline + 1_000, 2, "team-a"), Caller(deadline, 3, "team-b"), Caller()]
    )
    assert caller == Caller(deadline, 2, "team-a")
    future = client.submit("target", -1, [("X", np.ones((1, 4), np.float32))], [], {}, 0, caller)
    sync = redis.Redis.from_url(redis_url)
    try:
        stream = keys.request_stream("target", 1, 2)  # the caller's level, not the default 3
        entries = eventually_sync(lambda: sync.xrange(stream), bool, 50 * 0.05, every=0.05)
        (_, fields), *_ = entries
        header = envelope.decode_header(fields[keys.FIELD_HEADER])
        request = envelope.decode_request(fields[keys.FIELD_DATA])
        assert (header.priority, header.deadline_ms) == (2, deadline)
        assert (request.priority, request.tenant, request.outputs) == (2, "team-a", ["Y"])
        # Nobody answers: the call ends with the caller's deadline, as an error response.
        reply = future.result(timeout=10)
        assert reply.error_code == ErrorCode.DEADLINE_EXCEEDED
        assert time.time() * 1000 >= deadline
        # An explicit timeout (microseconds) shortens the deadline; never lengthens it.
        short = client.submit(
            "target", -1, [("X", np.ones((1, 4), np.float32))], [], {}, 100_000, Caller()
        )
        started = time.monotonic()
        assert short.result(timeout=10).error_code == ErrorCode.DEADLINE_EXCEEDED
        assert time.monotonic() - started < 1.0
    finally:
        sync.close()
        client.close()


def test_a_call_to_an_idle_model_goes_direct_with_the_callers_priority(redis_url: str) -> None:
    """Nothing queued, no batch in flight, no queue delay: the call is a batch of one on the
    model's batch stream (``shared.fleet.direct_path``), with the caller's level and deadline."""
    import asyncio

    asyncio.run(_publish(redis_url))
    sync = redis.Redis.from_url(redis_url)
    sync.delete(
        keys.batch_stream("target", 1), *(keys.request_stream("target", 1, p) for p in (1, 2, 3))
    )
    client = BlsClient(BlsSettings(redis_url=redis_url))
    deadline = clock.now_ms() + 2_000
    future = client.submit(
        "target", -1, [("X", np.ones((1, 4), np.float32))], [], {}, 0, Caller(deadline, 2, "t")
    )
    try:
        batches = keys.batch_stream("target", 1)
        entries = eventually_sync(lambda: sync.xrange(batches), bool, 50 * 0.05, every=0.05)
        [(_, fields)] = entries
        assert set(fields) == {keys.FIELD_HEADER, keys.FIELD_DIRECT}
        header = envelope.decode_header(fields[keys.FIELD_HEADER])
        request = envelope.decode_request(fields[keys.FIELD_DIRECT])
        assert (header.priority, header.deadline_ms, request.tenant) == (2, deadline, "t")
        assert sync.xlen(keys.request_stream("target", 1, 2)) == 0
        assert future.result(timeout=10).error_code == ErrorCode.DEADLINE_EXCEEDED
    finally:
        sync.close()
        client.close()


def test_a_model_with_no_ready_version_is_an_error_response(redis_url: str) -> None:
    client = BlsClient(BlsSettings(redis_url=redis_url))
    reply = client.submit("missing", -1, [], [], {}, 0, Caller()).result(timeout=10)
    assert reply.error_code == ErrorCode.NOT_FOUND
    assert "Request for unknown model: 'missing' is not found" in reply.error
    assert client.is_model_ready("missing", -1) is False
    client.close()


def test_a_call_for_callers_all_cancelled_is_answered_cancelled_and_marked(
    redis_url: str,
) -> None:
    """The call is recorded as a child beside its submission: when every caller was cancelled
    already, the call is marked cancelled itself (never started) and answered CANCELLED."""
    import asyncio

    asyncio.run(_publish(redis_url))
    sync = redis.Redis.from_url(redis_url)
    sync.set(keys.cancel("caller", "p1"), "1", px=60_000)
    client = BlsClient(BlsSettings(redis_url=redis_url, direct_path=False))
    try:
        deadline = clock.now_ms() + 5_000
        caller = Caller(deadline, model="caller", parents=("p1",))
        x = [("X", np.ones((1, 4), np.float32))]
        reply = client.submit("target", -1, x, [], {}, 0, caller).result(timeout=10)
        assert reply.error_code == ErrorCode.CANCELLED
        assert sync.exists(keys.cancel("target", reply.id)) == 1
        assert sync.sismember(keys.cancel_children("caller", "p1"), f"target\x00{reply.id}")
        # A live caller's call is recorded the same and not marked.
        live = Caller(deadline, model="caller", parents=("p2",))
        future = client.submit("target", -1, x, [], {}, 100_000, live)
        assert future.result(timeout=10).error_code == ErrorCode.DEADLINE_EXCEEDED
        [child] = sync.smembers(keys.cancel_children("caller", "p2"))
        text = child.decode() if isinstance(child, bytes) else child
        assert sync.exists(keys.cancel("target", text.partition("\x00")[2])) == 0
    finally:
        sync.close()
        client.close()


def test_a_model_published_after_the_view_was_read_is_found(redis_url: str) -> None:
    """The client's view of the models (``workers.python.bls_models``) is judged again on a
    fresh read when it misses: a model published since is called, not refused."""
    import asyncio

    client = BlsClient(BlsSettings(redis_url=redis_url, direct_path=False))
    try:
        x = [("X", np.ones((1, 4), np.float32))]
        assert client.submit("other", -1, x, [], {}, 0, Caller()).result(timeout=10).error_code
        asyncio.run(_publish(redis_url))  # "target", no change notice sent
        reply = client.submit("target", -1, x, [], {}, 100_000, Caller()).result(timeout=10)
        assert reply.error_code == ErrorCode.DEADLINE_EXCEEDED  # queued; nobody answers
        assert client.is_model_ready("target", -1) is True
        assert client.is_model_ready("target", 2) is False
    finally:
        client.close()
