"""The queue of one (model, version): its step loop, from read requests to sent batches.

Requests read from the priority streams wait here (``scheduler.queueing.pending``). A task per queue
answers the ones that may no longer wait (``scheduler.queueing.expiry``), asks the pure batcher
(``scheduler.queueing.batcher``) what to send, and sends it in one fenced script
(``scheduler.queueing.dispatch``). A request leaves this queue only once the write that takes it off
its stream succeeded: after a failed step everything is still here and the step runs again, and the
service re-reads this scheduler's own pending entries (``on_failure``) in case a read's answer was
lost.

Batches are held back while the workers already have enough queued: the pending batch keeps
growing (up to max_batch_size) while every instance is busy, as Triton's payload does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import redis.asyncio as aioredis

from scheduler.queueing.batcher import BatchPolicy, decide
from scheduler.queueing.cancels import answer_cancelled
from scheduler.queueing.dispatch import new_batch, send, trace_queued
from scheduler.queueing.error_answers import answer_errors
from scheduler.queueing.pending import Pending, PendingRequests
from shared import metrics
from shared.model_config import ModelConfig
from shared.runtime import precise_timer, tracing
from shared.wire import keys
from shared.wire.envelope import RequestHeader
from shared.wire.errors import ErrorCode

log = logging.getLogger(__name__)


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
        *,
        consumer: str,
        on_failure: Callable[[], None] | None = None,
    ):
        self._redis = r
        # This scheduler's name in the consumer group: what it owns is pending under it.
        self.consumer = consumer
        self._on_failure = on_failure
        self.model = config.name
        self.version = version
        self.policy = policy_for(config)
        self.batch_stream = keys.batch_stream(self.model, version)
        self._pending = PendingRequests()
        self._arrived = asyncio.Event()
        self._delay_end = precise_timer.Alarm(self._arrived.set)
        self._backlog = 0
        self._backlog_poll_s = backlog_poll_us / 1e6
        self._synced_us = 0.0
        self._per_instance = queued_per_instance
        self.instances = 1
        self.batches = 0
        self.batched_requests = 0
        self.levels = config.priority_levels()
        # A decoupled model's batch stays on the batch stream until its last response, long
        # after its instance took the next one: its backlog says nothing about busy instances.
        self._unbounded = config.decoupled
        # Cancelled request ids to take out at the next step (``scheduler.queueing.cancels``), and
        # the question asked of each arrival: cancelled before it was read?
        self._cancels: set[str] = set()
        self.was_cancelled: Callable[[str], bool] | None = None
        self._queue_hist = {
            level: metrics.child(metrics.QUEUE_SECONDS, self.model, version, level)
            for level in self.levels
        }

    def export(self) -> None:
        """Scrape hook: depth and oldest-entry age per priority, and Triton's pending count."""
        self._pending.export(self.model, self.version, self.levels)

    def update(self, config: ModelConfig, instances: int) -> None:
        self.policy = policy_for(config)
        self.instances = max(1, instances)
        self.levels = config.priority_levels()
        self._unbounded = config.decoupled

    def add(self, header: RequestHeader, stream: bytes, entry_id: bytes, data: bytes) -> None:
        if self._pending.add(header, stream, entry_id, data):
            if self.was_cancelled is not None and self.was_cancelled(header.id):
                self._cancels.add(header.id)
            self._arrived.set()

    def cancel(self, request_id: str) -> None:
        """Its client cancelled it: taken out of the queue at the next step, if held here."""
        self._cancels.add(request_id)
        self._arrived.set()

    def holds(self, stream: bytes, entry_id: bytes) -> bool:
        return self._pending.holds(stream, entry_id)

    def __len__(self) -> int:
        return len(self._pending)

    @property
    def _limit(self) -> int:
        if self._unbounded:
            return 1 << 30
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
                if self._on_failure is not None:
                    self._on_failure()
                await asyncio.sleep(0.1)

    def _head_size(self) -> int:
        """How many requests the batcher may look at: one more than can fit a batch, so it
        sees where the batch would stop."""
        policy = self.policy
        if policy.enabled and policy.max_batch_size > 0:
            return policy.max_batch_size + 1
        return 1

    async def _step(self) -> None:
        if self._cancels:
            await self._take_cancelled()
        await self._expire()
        now_us = time.monotonic() * 1e6
        head = self._pending.head(self._head_size())
        decision = decide(head, now_us, self.policy)
        held = False
        if decision.take:
            if self._backlog < self._limit:
                await self._dispatch(head[: decision.take])
                return
            held = True
            # Workers announce each finished batch (on_batch_done); the backlog is re-read only
            # as a fallback, in case an announcement was missed.
            if now_us - self._synced_us >= self._backlog_poll_s * 1e6:
                self._backlog = int(await self._redis.xlen(self.batch_stream))
                self._synced_us = now_us
                if self._backlog < self._limit:
                    return  # capacity freed: decide again at once, the batch may have grown
        timeout: float | None = self._backlog_poll_s if held else None
        expiry_ms = self._pending.next_expiry_ms()
        if expiry_ms is not None:
            expiry = max(0.0, (expiry_ms - time.time() * 1000) / 1000) + 0.0005
            timeout = expiry if timeout is None else min(timeout, expiry)
        self._arrived.clear()
        # The batcher's delay ends on the precise timer: the loop's own is a millisecond coarse.
        self._delay_end.keep(
            None if held or decision.wake_at_us is None else decision.wake_at_us / 1e6
        )
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

    async def _expire(self) -> None:
        expired = self._pending.due(time.time() * 1000)
        if not expired:
            return
        try:
            await self.answer_errors(
                [(i.header, i.stream, i.entry_id) for i, _ in expired],
                [msg for _, msg in expired],
                ErrorCode.UNAVAILABLE,
            )
        except BaseException:
            self._pending.retry(expired)  # still held: answered at the next step
            raise
        self._pending.remove([item for item, _ in expired])

    async def _take_cancelled(self) -> None:
        ids, self._cancels = self._cancels, set()
        taken = self._pending.take_cancelled(ids)
        if not taken:
            return
        try:
            await answer_cancelled(
                self._redis,
                self.model,
                self.version,
                [(i.header, i.stream, i.entry_id) for i in taken],
                self.consumer,
            )
        except BaseException:
            self._pending.untake(taken)
            self._cancels |= {i.header.id for i in taken}
            raise
        self._pending.remove(taken)

    async def retire(self, message: str) -> None:
        """The version is no longer served: answer every request still held with an error."""
        held = self._pending.head(len(self._pending))
        if held:
            await self.answer_errors(
                [(i.header, i.stream, i.entry_id) for i in held],
                [message] * len(held),
                ErrorCode.UNAVAILABLE,
            )
            self._pending.remove(held)

    async def answer_errors(
        self,
        items: list[tuple[RequestHeader, bytes, bytes]],
        messages: list[str],
        code: ErrorCode,
    ) -> None:
        """Answer requests with an error and remove them from their streams (those this
        scheduler still owns)."""
        await answer_errors(
            self._redis, self.model, self.version, items, messages, code, self.consumer
        )

    async def _dispatch(self, chosen: list[Pending]) -> None:
        batch = new_batch(self.model, self.version, chosen)
        sent = await send(self._redis, self.batch_stream, batch, chosen, self.consumer)
        if sent.not_ours:
            # Claimed by another scheduler while this one was frozen, or already sent by a
            # dispatch whose answer was lost: not this queue's any more. Decide again.
            metrics.record_late_result("scheduler", self.model, self.version, len(sent.not_ours))
            log.warning(
                "requests no longer owned by this scheduler dropped from its queue",
                extra={"model": self.model, "count": len(sent.not_ours)},
            )
            self._pending.remove(sent.not_ours)
            return
        self._backlog = sent.backlog
        self._pending.remove(chosen)
        hist = self._queue_hist
        for p, ns in zip(chosen, batch.queue_ns, strict=True):
            observe = hist.get(p.header.priority)
            if observe is None:
                observe = hist[p.header.priority] = metrics.child(
                    metrics.QUEUE_SECONDS, self.model, self.version, p.header.priority
                )
            observe.observe(ns / 1e9)
        if tracing.ENABLED:
            trace_queued(self.model, self.version, chosen, batch.queue_ns)
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
