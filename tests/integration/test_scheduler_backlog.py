"""The scheduler's per-step work does not grow with the backlog (issue 12, defect 8).

Before: each step scanned every queued request for expiry (twice) and inserted with ``insort``,
so draining N queued requests cost O(N²). Work is counted, not timed: the number of Python lines
the scheduler's own modules run during one step, which does not depend on the machine's speed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import redis.asyncio as aioredis

import scheduler
from scheduler.queueing.pending import PendingRequests
from shared.fleet import streams
from shared.wire import envelope, keys
from shared.wire.envelope import RequestHeader
from tests.queue_harness import CONSUMER, MODEL, VERSION, Harness, model_config

SCHEDULER_DIR = str(Path(scheduler.__file__).parent)


class LineCounter:
    """Counts the lines run in the scheduler package while active (sys.settrace)."""

    def __init__(self) -> None:
        self.lines = 0

    def _global(self, frame: FrameType, event: str, arg: Any) -> Callable[..., Any] | None:
        if frame.f_code.co_filename.startswith(SCHEDULER_DIR):
            return self._local
        return None

    def _local(self, frame: FrameType, event: str, arg: Any) -> Callable[..., Any] | None:
        if event == "line":
            self.lines += 1
        return self._local

    def __enter__(self) -> LineCounter:
        sys.settrace(self._global)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.settrace(None)


def header(n: int, now_ms: int, queue_timeout_us: int = 0) -> RequestHeader:
    return RequestHeader(
        id=f"r{n}",
        reply_to="r",
        deadline_ms=now_ms + 60_000 + n,
        priority=1,
        batch_size=1,
        shape_sig="INPUT0:16",
        enqueued_ms=now_ms,
        queue_timeout_us=queue_timeout_us,
    )


def one_round(pending: PendingRequests, backlog: int) -> int:
    """Lines run by what a step does with the pending requests, with ``backlog`` queued."""
    now = int(time.time() * 1000)
    for n in range(backlog):
        pending.add(header(n, now, 30_000_000 if n % 2 else 0), b"s", f"{n}-0".encode(), b"d")
    with LineCounter() as counter:
        pending.add(header(backlog, now), b"s", f"{backlog}-0".encode(), b"d")
        pending.due(now + 1)
        head = pending.head(9)
        pending.remove(head[:8])
        pending.next_expiry_ms()
    return counter.lines


def test_pending_bookkeeping_per_step_does_not_grow_with_the_backlog() -> None:
    small = one_round(PendingRequests(), 100)
    large = one_round(PendingRequests(), 20_000)
    assert large == small, f"{small} lines with 100 queued, {large} with 20,000"


async def _queue_entries(r: aioredis.Redis, h: Harness, count: int) -> None:
    """``count`` requests enqueued and read as the scheduler reads them, handed to the queue."""
    stream = keys.request_stream(MODEL, VERSION, 1)
    await streams.ensure_group(r, stream, keys.SCHEDULER_GROUP)
    now = int(time.time() * 1000)
    async with r.pipeline(transaction=False) as pipe:
        for n in range(count):
            pipe.xadd(
                stream,
                {keys.FIELD_HEADER: envelope.encode(header(n, now)), keys.FIELD_DATA: b"d"},
            )
        await pipe.execute()
    read = await r.xreadgroup(keys.SCHEDULER_GROUP, CONSUMER, {stream: ">"}, count=count)
    for entry in streams.parse_read(read):
        h.queue.add(
            envelope.decode_header(entry.fields[keys.FIELD_HEADER]),
            entry.stream,
            entry.entry_id,
            entry.fields[keys.FIELD_DATA],
        )


async def _lines_of_one_step(r: aioredis.Redis, backlog: int) -> int:
    await r.flushall()
    h = Harness(r, model_config(max_batch_size=8), queued_per_instance=1_000_000)
    await _queue_entries(r, h, backlog)
    with LineCounter() as counter:
        await h.queue._step()  # one step: expire, decide, dispatch one batch of 8
    assert await r.xlen(h.queue.batch_stream) == 1
    return counter.lines


async def test_one_scheduling_step_does_not_grow_with_the_backlog(aredis: aioredis.Redis) -> None:
    small = await _lines_of_one_step(aredis, 50)
    large = await _lines_of_one_step(aredis, 5_000)
    # A few lines differ between runs (first-use caches); a scan would add thousands.
    assert abs(large - small) <= 20, f"{small} lines with 50 queued, {large} with 5,000"
