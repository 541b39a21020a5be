"""The scheduler's side of cancellation, without Redis: a cancelled request leaves the head of
its queue at once (no batch can take it) and the requests behind it move up; one cancelled
before it was read is marked when it arrives; a failed answer puts it back. The Redis side
(answered, acked, counted once) is proven end to end in tests/e2e/test_streaming.py."""

from __future__ import annotations

import redis.asyncio as aioredis

from scheduler.queueing.cancels import SchedulerCancels
from scheduler.queueing.pending import PendingRequests
from scheduler.queueing.version_queue import VersionQueue
from shared.model_config import parse_pbtxt
from shared.wire.envelope import RequestHeader

CONFIG = parse_pbtxt(
    """
    name: "m"
    platform: "onnxruntime_onnx"
    max_batch_size: 2
    input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
    dynamic_batching { }
    """
)


def header(request_id: str) -> RequestHeader:
    return RequestHeader(
        id=request_id,
        reply_to="r",
        deadline_ms=10**13,
        priority=1,
        batch_size=1,
        shape_sig="1",
        enqueued_ms=0,
    )


def test_a_taken_request_leaves_the_head_and_untake_restores_it() -> None:
    pending = PendingRequests()
    for i, name in enumerate(["a", "b", "c"]):
        pending.add(header(name), b"s", f"{i}-0".encode(), b"d")
    taken = pending.take_cancelled({"b", "nope"})
    assert [t.header.id for t in taken] == ["b"]
    assert [p.header.id for p in pending.head(10)] == ["a", "c"]
    assert pending.take_cancelled({"b"}) == []  # taken once
    pending.untake(taken)  # its answer failed: back in its place
    assert [p.header.id for p in pending.head(10)] == ["a", "b", "c"]
    pending.take_cancelled({"b"})
    pending.remove(taken)
    assert len(pending) == 2 and [p.header.id for p in pending.head(10)] == ["a", "c"]


def test_cancels_reach_the_queues_of_their_model_only() -> None:
    r = aioredis.Redis()
    mine = VersionQueue(r, CONFIG, 1, 1000, 0, consumer="s")
    other = VersionQueue(r, parse_pbtxt(CONFIG_TEXT_OTHER), 1, 1000, 0, consumer="s")
    cancels = SchedulerCancels({("m", 1): mine, ("other", 1): other})
    cancels.on_heard("m", "x")
    assert mine._cancels == {"x"} and other._cancels == set()


def test_a_request_cancelled_before_it_was_read_is_marked_on_arrival() -> None:
    queue = VersionQueue(aioredis.Redis(), CONFIG, 1, 1000, 0, consumer="s")
    cancels = SchedulerCancels({("m", 1): queue})
    queue.was_cancelled = cancels.attach()
    cancels.heard.add("early")  # heard on the channel before the intake read it
    queue.add(header("early"), b"s", b"1-0", b"d")
    queue.add(header("fine"), b"s", b"2-0", b"d")
    assert queue._cancels == {"early"}


CONFIG_TEXT_OTHER = """
name: "other"
platform: "onnxruntime_onnx"
max_batch_size: 2
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
