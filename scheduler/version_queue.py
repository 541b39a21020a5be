"""The queue of one (model, version): policy (deadlines, queue timeouts), batching, dispatch.

Requests read from the priority streams wait here, in service order (priority, then arrival;
requests delayed by a DELAY timeout policy go behind the others of their level). A task per queue
asks the pure batcher what to send and dispatches it atomically: the batch is added to the batch
stream and its requests acked and deleted from the request streams in one transaction, so a
request is either still queued or in exactly one batch.

Batches are held back while the workers already have enough queued: the pending batch keeps
growing (up to max_batch_size) while every instance is busy, as Triton's payload does.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field

import redis.asyncio as aioredis

from scheduler.batcher import BatchPolicy, decide
from shared import envelope, keys, metrics, tracing
from shared.envelope import Batch, RequestHeader
from shared.errors import ErrorCode
from shared.ids import new_id
from shared.model_config import ModelConfig
from shared.publish import queue_replies

log = logging.getLogger(__name__)


@dataclass(order=True)
class Pending:
    sort_key: tuple[int, int, int]
    header: RequestHeader = field(compare=False)
    stream: bytes = field(compare=False)
    entry_id: bytes = field(compare=False)
    data: bytes = field(compare=False)
    arrival_us: float = field(compare=False)

    @property
    def batch_size(self) -> int:
        return self.header.batch_size

    @property
    def shape_sig(self) -> str:
        return self.header.shape_sig


def policy_for(config: ModelConfig) -> BatchPolicy:
    batching = config.dynamic_batching
    if batching is None:
        return BatchPolicy(max_batch_size=config.max_batch_size, enabled=False)
    return BatchPolicy(
        max_batch_size=config.max_batch_size,
        preferred_batch_sizes=tuple(batching.preferred_batch_size),
        max_queue_delay_us=batching.max_queue_delay_microseconds,
    )


class VersionQueue:
    def __init__(
        self,
        r: aioredis.Redis,
        config: ModelConfig,
        version: int,
        backlog_poll_us: int,
        queued_per_instance: int,
    ):
        self._redis = r
        self.model = config.name
        self.version = version
        self.policy = policy_for(config)
        self.batch_stream = keys.batch_stream(self.model, version)
        self._pending: list[Pending] = []
        # (stream, entry id): ids are per stream, and the priority streams share this queue.
        self._ids: set[tuple[bytes, bytes]] = set()
        self._seq = 0
        self._arrived = asyncio.Event()
        self._backlog = 0
        self._backlog_poll_s = backlog_poll_us / 1e6
        self._synced_us = 0.0
        self._per_instance = queued_per_instance
        self.instances = 1
        self.batches = 0
        self.batched_requests = 0
        self.levels = config.priority_levels()
        self._queue_hist = {
            level: metrics.child(metrics.QUEUE_SECONDS, self.model, version, level)
            for level in self.levels
        }

    def export(self) -> None:
        """Scrape hook: depth and oldest-entry age per priority, and Triton's pending count."""
        now_us = time.monotonic() * 1e6
        depth = dict.fromkeys(self.levels, 0)
        oldest = dict.fromkeys(self.levels, now_us)
        for item in self._pending:
            level = item.header.priority
            depth[level] = depth.get(level, 0) + 1
            oldest[level] = min(oldest.get(level, now_us), item.arrival_us)
        for level, count in depth.items():
            metrics.child(metrics.QUEUE_DEPTH, self.model, self.version, level).set(count)
            age = (now_us - oldest[level]) / 1e6 if count else 0.0
            metrics.child(metrics.QUEUE_OLDEST_AGE, self.model, self.version, level).set(age)
        metrics.child(metrics.PENDING, self.model, self.version).set(len(self._pending))

    def update(self, config: ModelConfig, instances: int) -> None:
        self.policy = policy_for(config)
        self.instances = max(1, instances)
        self.levels = config.priority_levels()

    def add(self, header: RequestHeader, stream: bytes, entry_id: bytes, data: bytes) -> None:
        if (stream, entry_id) in self._ids:
            return
        self._seq += 1
        item = Pending(
            (header.priority, 0, self._seq),
            header,
            stream,
            entry_id,
            data,
            time.monotonic() * 1e6,
        )
        bisect.insort(self._pending, item)
        self._ids.add((stream, entry_id))
        self._arrived.set()

    def __len__(self) -> int:
        return len(self._pending)

    @property
    def _limit(self) -> int:
        return self.instances * (1 + self._per_instance)

    async def run(self) -> None:
        task = asyncio.current_task()
        # Batches already queued (a scheduler restart, a failover) count against the limit.
        self._backlog = int(await self._redis.xlen(self.batch_stream))
        while True:
            # On Python 3.11 a cancellation landing inside redis-py's asyncio.wait_for can be
            # swallowed (CPython gh-86296); the task still counts it, so honour it here.
            if task is not None and task.cancelling():
                raise asyncio.CancelledError
            try:
                await self._step()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("queue step failed", extra={"model": self.model})
                await asyncio.sleep(0.1)

    async def _step(self) -> None:
        await self._expire()
        now_us = time.monotonic() * 1e6
        decision = decide(self._pending, now_us, self.policy)
        held = False
        if decision.take:
            if self._backlog < self._limit:
                await self._dispatch(decision.take)
                return
            held = True
            # Workers announce each finished batch (on_batch_done); the backlog is re-read only
            # as a fallback, in case an announcement was missed.
            if now_us - self._synced_us >= self._backlog_poll_s * 1e6:
                self._backlog = int(await self._redis.xlen(self.batch_stream))
                self._synced_us = now_us
                if self._backlog < self._limit:
                    return  # capacity freed: decide again at once, the batch may have grown
        timeout: float | None = None
        if held:
            timeout = self._backlog_poll_s
        elif decision.wake_at_us is not None:
            timeout = max(0.0, (decision.wake_at_us - now_us) / 1e6)
        expiry = self._next_expiry_s()
        if expiry is not None:
            timeout = expiry if timeout is None else min(timeout, expiry)
        self._arrived.clear()
        if timeout is None:
            await self._arrived.wait()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._arrived.wait(), timeout)

    def on_batch_done(self) -> None:
        """A worker finished a batch of this version: one more may be sent."""
        self._backlog = max(0, self._backlog - 1)
        self._synced_us = time.monotonic() * 1e6
        self._arrived.set()

    def _next_expiry_s(self) -> float | None:
        """Seconds until the earliest deadline or queue timeout among pending requests."""
        if not self._pending:
            return None
        now_ms = time.time() * 1000
        soonest = min(_expiry_ms(p.header) for p in self._pending)
        return max(0.0, (soonest - now_ms) / 1000) + 0.0005

    async def _expire(self) -> None:
        if not self._pending:
            return
        now_ms = time.time() * 1000
        expired: list[tuple[Pending, str]] = []
        keep: list[Pending] = []
        moved = False
        for item in self._pending:
            h = item.header
            if now_ms >= h.deadline_ms:
                expired.append(
                    (
                        item,
                        "Request timeout expired: the request's deadline passed "
                        "before it could be scheduled",
                    )
                )
            elif (
                h.queue_timeout_us
                and item.sort_key[1] == 0
                and (now_ms >= h.enqueued_ms + h.queue_timeout_us / 1000)
            ):
                if h.delay_on_timeout:
                    item.sort_key = (item.sort_key[0], 1, item.sort_key[2])
                    moved = True
                    keep.append(item)
                else:
                    expired.append((item, "Request timeout expired"))
            else:
                keep.append(item)
        if not expired and not moved:
            return
        keep.sort()
        self._pending = keep
        if expired:
            await self.answer_errors(
                [(i.header, i.stream, i.entry_id) for i, _ in expired],
                [msg for _, msg in expired],
                ErrorCode.UNAVAILABLE,
            )
            for item, _ in expired:
                self._ids.discard((item.stream, item.entry_id))

    async def answer_errors(
        self,
        items: list[tuple[RequestHeader, bytes, bytes]],
        messages: list[str],
        code: ErrorCode,
    ) -> None:
        """Answer requests with an error and remove them from their streams."""
        by_stream: dict[bytes, list[bytes]] = defaultdict(list)
        # Triton's reasons: a scheduler timeout is REJECTED; a delivery limit is OTHER.
        reason = metrics.REJECTED if code == ErrorCode.UNAVAILABLE else metrics.OTHER
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hincrby(keys.stats(self.model, self.version), "fail_count", len(items))
            queue_replies(
                pipe,
                (
                    (
                        h.reply_to,
                        envelope.error_reply(h.id, self.model, self.version, code.value, msg),
                    )
                    for (h, _, _), msg in zip(items, messages, strict=True)
                ),
            )
            for _, stream, entry_id in items:
                by_stream[stream].append(entry_id)
            _ack_delete(pipe, by_stream)
            await pipe.execute()
        metrics.record_failures(self.model, self.version, reason, len(items))
        log.warning(
            "requests answered with an error by the scheduler",
            extra={
                "model": self.model,
                "version": self.version,
                "count": len(items),
                "reason": messages[0],
            },
        )

    async def _dispatch(self, take: int) -> None:
        chosen, self._pending = self._pending[:take], self._pending[take:]
        now_ms = time.time() * 1000
        batch = Batch(
            batch_id=new_id(),
            model=self.model,
            version=self.version,
            formed_ms=int(now_ms),
            requests=[p.data for p in chosen],
            queue_ns=[max(0, int((now_ms - p.header.enqueued_ms) * 1e6)) for p in chosen],
        )
        by_stream: dict[bytes, list[bytes]] = defaultdict(list)
        for p in chosen:
            by_stream[p.stream].append(p.entry_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.xadd(self.batch_stream, {keys.FIELD_DATA: envelope.encode(batch)})
            _ack_delete(pipe, by_stream)
            pipe.xlen(self.batch_stream)
            results = await pipe.execute()
        self._backlog = int(results[-1])
        hist = self._queue_hist
        for p, ns in zip(chosen, batch.queue_ns, strict=True):
            self._ids.discard((p.stream, p.entry_id))
            observe = hist.get(p.header.priority)
            if observe is None:
                observe = hist[p.header.priority] = metrics.child(
                    metrics.QUEUE_SECONDS, self.model, self.version, p.header.priority
                )
            observe.observe(ns / 1e9)
        if tracing.ENABLED:
            self._trace(chosen, batch.queue_ns)
        self.batches += 1
        self.batched_requests += len(chosen)
        log.debug(
            "batch dispatched",
            extra={
                "model": self.model,
                "version": self.version,
                "batch_size": len(chosen),
                "backlog": self._backlog,
            },
        )

    def _trace(self, chosen: list[Pending], queue_ns: list[int]) -> None:
        now_ns = time.time_ns()
        for p, ns in zip(chosen, queue_ns, strict=True):
            tracing.record(
                "conch.scheduler.queue",
                tracing.decode_trace(p.data),
                now_ns - ns,
                now_ns,
                {"model": self.model, "version": self.version, "priority": p.header.priority},
            )


def _expiry_ms(header: RequestHeader) -> float:
    expiry = float(header.deadline_ms)
    if header.queue_timeout_us and not header.delay_on_timeout:
        expiry = min(expiry, header.enqueued_ms + header.queue_timeout_us / 1000)
    return expiry


def _ack_delete(pipe: aioredis.client.Pipeline, by_stream: dict[bytes, list[bytes]]) -> None:
    for stream, ids in by_stream.items():
        pipe.xack(stream, keys.SCHEDULER_GROUP, *ids)
        pipe.xdel(stream, *ids)
