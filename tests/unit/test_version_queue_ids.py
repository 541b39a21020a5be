"""Stream entry ids are per stream: two priority streams of one version can hand the scheduler
the same id in the same millisecond, and both requests must be queued (regression: the second
one was dropped as a duplicate and its caller timed out)."""

from __future__ import annotations

import redis.asyncio as aioredis

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
    dynamic_batching { priority_levels: 2 }
    """
)


def header(request_id: str, priority: int) -> RequestHeader:
    return RequestHeader(
        id=request_id,
        reply_to="r",
        deadline_ms=1,
        priority=priority,
        batch_size=1,
        shape_sig="1",
        enqueued_ms=0,
    )


def test_same_entry_id_on_two_priority_streams_queues_both() -> None:
    queue = VersionQueue(aioredis.Redis(), CONFIG, 1, 1000, 1, consumer="s")
    queue.add(header("low", 2), b"req:1:p2", b"1700000000000-0", b"d")
    queue.add(header("high", 1), b"req:1:p1", b"1700000000000-0", b"d")
    queue.add(header("high", 1), b"req:1:p1", b"1700000000000-0", b"d")  # a redelivery
    assert len(queue) == 2
    assert [p.header.id for p in queue._pending.head(10)] == ["high", "low"]
