"""A VersionQueue on a real redis-server, driven as the scheduler service drives it: requests
are real stream entries delivered to the scheduler group, then handed to the queue, whose own
loop (``run``) forms and dispatches batches. Shared by the queue's tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

import pytest
import redis.asyncio as aioredis

from scheduler.queueing.version_queue import VersionQueue
from shared.fleet import streams
from shared.model_config import ModelConfig, parse_pbtxt
from shared.wire import envelope, keys
from shared.wire.envelope import Batch, InferRequest, Reply, RequestHeader, Tensor
from tests.waiting import eventually

MODEL = "vq"
VERSION = 1
REPLY_TO = keys.reply_stream("gateway-test")
CONSUMER = "scheduler-test"
SIG = "INPUT0:16"

T = TypeVar("T")


def model_config(
    max_batch_size: int = 8,
    delay_us: int = 0,
    preferred: tuple[int, ...] = (),
    priority_levels: int = 0,
    batching: bool = True,
) -> ModelConfig:
    dynamic = ""
    if batching:
        sizes = f"preferred_batch_size: [ {', '.join(map(str, preferred))} ]" if preferred else ""
        levels = f"priority_levels: {priority_levels}" if priority_levels else ""
        dynamic = (
            f"dynamic_batching {{ max_queue_delay_microseconds: {delay_us} {sizes} {levels} }}"
        )
    return parse_pbtxt(
        f"""
        name: "{MODEL}"
        platform: "onnxruntime_onnx"
        max_batch_size: {max_batch_size}
        input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] }} ]
        output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] }} ]
        {dynamic}
        """
    )


async def force_stop(task: asyncio.Task[None], grace: float = 0.2) -> bool:
    """Cancel until the task is done; True if the first cancel was enough.

    Under Python 3.11, redis-py's send path (asyncio.wait_for around the socket write) can swallow
    a cancellation (see test_run_stops_when_cancelled), so one cancel may not stop the loop.
    """
    task.cancel()
    await asyncio.wait({task}, timeout=grace)
    first = task.done()
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.01)
    return first


class Harness:
    def __init__(
        self,
        r: aioredis.Redis,
        config: ModelConfig,
        backlog_poll_us: int = 2_000,
        queued_per_instance: int = 100,
    ):
        self.r = r
        self.queue = VersionQueue(
            r, config, VERSION, backlog_poll_us, queued_per_instance, consumer=CONSUMER
        )
        self.task: asyncio.Task[None] | None = None
        self.headers: dict[str, RequestHeader] = {}
        self.entries: dict[str, tuple[bytes, bytes]] = {}
        self.data: dict[str, bytes] = {}

    async def submit(
        self,
        rid: str,
        *,
        priority: int = 1,
        batch_size: int = 1,
        shape_sig: str = SIG,
        deadline_in_ms: int = 30_000,
        enqueued_ago_ms: int = 0,
        queue_timeout_us: int = 0,
        delay_on_timeout: bool = False,
        add: bool = True,
    ) -> RequestHeader:
        """Enqueue as the gateway does, read as the scheduler does, and hand to the queue."""
        now_us = time.time_ns() // 1000
        now = now_us // 1000
        header = RequestHeader(
            id=rid,
            reply_to=REPLY_TO,
            deadline_ms=now + deadline_in_ms,
            priority=priority,
            batch_size=batch_size,
            shape_sig=shape_sig,
            enqueued_ms=now - enqueued_ago_ms,
            queue_timeout_us=queue_timeout_us,
            delay_on_timeout=delay_on_timeout,
            enqueued_us=now_us - enqueued_ago_ms * 1000,
        )
        request = InferRequest(
            id=rid,
            model=MODEL,
            version=VERSION,
            inputs=[Tensor("INPUT0", "INT32", [batch_size, 16], bytes(64 * batch_size))],
            outputs=[],
            parameters={},
            reply_to=REPLY_TO,
            deadline_ms=header.deadline_ms,
            enqueued_ms=header.enqueued_ms,
        )
        stream = keys.request_stream(MODEL, VERSION, priority)
        await streams.ensure_group(self.r, stream, keys.SCHEDULER_GROUP)
        data = envelope.encode(request)
        entry_id = await self.r.xadd(
            stream, {keys.FIELD_HEADER: envelope.encode(header), keys.FIELD_DATA: data}
        )
        read = await self.r.xreadgroup(keys.SCHEDULER_GROUP, CONSUMER, {stream: ">"}, count=1)
        [entry] = streams.parse_read(read)
        assert entry.entry_id == entry_id
        self.headers[rid] = header
        self.entries[rid] = (stream.encode(), entry_id)
        self.data[rid] = data
        if add:
            self.queue.add(header, stream.encode(), entry_id, data)
        return header

    def hand(self, rid: str) -> None:
        """Hand a request submitted with ``add=False`` to the queue now."""
        self.queue.add(self.headers[rid], *self.entries[rid], self.data[rid])

    def start(self) -> None:
        self.task = asyncio.create_task(self.queue.run())

    async def stop(self) -> None:
        if self.task is not None:
            await force_stop(self.task)

    # What the rest of the mesh sees.

    async def batches(self) -> list[Batch]:
        rows = await self.r.xrange(self.queue.batch_stream)
        return [envelope.decode_batch(fields[keys.FIELD_DATA]) for _, fields in rows]

    async def batch_ids(self) -> list[list[str]]:
        return [
            [envelope.decode_request(raw).id for raw in batch.requests]
            for batch in await self.batches()
        ]

    async def replies(self) -> list[Reply]:
        rows = await self.r.xrange(REPLY_TO)
        return [
            reply
            for _, fields in rows
            for reply in envelope.decode_replies(fields[keys.FIELD_DATA])
        ]

    async def wait_batches(self, count: int, within: float = 3.0) -> list[list[str]]:
        return await eventually(self.batch_ids, lambda b: len(b) >= count, within)

    async def wait_replies(self, count: int, within: float = 3.0) -> list[Reply]:
        return await eventually(self.replies, lambda r: len(r) >= count, within)

    async def still_queued(self, rid: str) -> bool:
        """Whether the request's entry is still in its stream and pending for the scheduler."""
        stream, entry_id = self.entries[rid]
        present = await self.r.xrange(stream, entry_id, entry_id)
        pending = await self.r.xpending_range(stream, keys.SCHEDULER_GROUP, entry_id, entry_id, 1)
        return bool(present) or bool(pending)


@pytest.fixture
async def harness(aredis: aioredis.Redis) -> AsyncIterator[Callable[..., Harness]]:
    made: list[Harness] = []

    def make(config: ModelConfig | None = None, **kwargs) -> Harness:
        h = Harness(aredis, config or model_config(), **kwargs)
        made.append(h)
        return h

    yield make
    for h in made:
        await h.stop()
