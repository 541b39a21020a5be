"""A finished batch's replies and fenced ack, and what the worker records once they are answered.

The batch loop sends an outcome in one of two ways. Usually it rides on the loop's next read:
one write on the reading connection carries the replies, the fenced ack and the next blocking
``XREADGROUP`` (``workers.batches.batch_loop``), so the loop is blocked on its read again the moment
the batch is answered, with no round trip in between, and Redis reads one write per batch, not two.
Otherwise (a batch to take from the lane first, a recovery, a stop, Redis Cluster, a failure of
that write) it goes alone through the shared pool, retried while Redis is away (``send``).

Either way the replies come first and the ack after them in the same write, so a batch is acked
only once its replies are published; the ack is the fenced script (``shared.fleet.fencing``), so a
batch that another worker claimed meanwhile is neither acked nor counted in the statistics hash,
and its outcome is counted as a late result instead of in the batch's Prometheus series.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline

from shared import metrics
from shared.fleet import streams
from shared.fleet.fencing import queue_fenced_ack
from shared.fleet.publish import queue_replies
from shared.runtime import tracing
from shared.runtime.redis_retry import until_answered
from shared.wire import keys
from shared.wire.envelope import InferRequest, Reply

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    entry: streams.Entry
    model: str
    version: int
    worker: str
    replies: list[tuple[str, Reply]]
    # The batch's increment of the statistics hash (``keys.stats``).
    stats: dict[str, int]
    now_ms: float
    requests: list[InferRequest]
    # Requests that did not run (deadline passed); cancelled ones are in ``stats``.
    unrun: int
    ran: bool
    # A direct request (``shared.wire.batch_entry``): its priority level and time in the queue.
    direct_level: int | None = None
    direct_queue_ns: int = 0
    # When its replies were ready (the start of its ``conch.worker.reply`` spans).
    published_ns: int = field(default_factory=time.time_ns)
    recorded: bool = field(default=False, init=False)
    # Its ack answered (acked, or refused by the fence): nothing of it is left to send.
    settled: bool = field(default=False, init=False)

    def queue(self, pipe: Pipeline) -> None:
        """Queue the replies, then the fenced ack (the last command queued)."""
        queue_replies(pipe, self.replies)
        queue_fenced_ack(
            pipe,
            self.entry.stream,
            keys.stats(self.model, self.version),
            keys.WORKER_GROUP,
            self.worker,
            self.entry.entry_id,
            # A direct request was never the scheduler's to count: telling it would only wake
            # it, once a request at c=1 (its backlog counts the batches it dispatched).
            ""
            if self.direct_level is not None
            else keys.batch_done_channel(self.model, self.version),
            self.stats,
            int(self.now_ms),
            len(self.requests),
        )

    async def send(self, r: aioredis.Redis, bound_s: float) -> bool:
        """Alone, through the pool; connection errors retried for ``bound_s`` (the batch ran:
        a Redis restart retries its replies and ack, never its execution). True: acked."""

        async def publish_and_ack() -> Any:
            async with r.pipeline(transaction=False) as pipe:
                self.queue(pipe)
                return (await pipe.execute())[-1]

        acked = bool(await until_answered(publish_and_ack, bound_s))
        self._conclude(acked)
        return acked

    def settle(self, answers: list[Any]) -> bool:
        """Its answers (a pipeline's, errors as objects; the ack's last): True when settled
        (acked, or refused by the fence), False when a command failed and it is to be sent
        again."""
        if any(isinstance(answer, Exception) for answer in answers):
            log.warning(
                "a batch's replies or ack failed; sending them again",
                extra={"model": self.model, "errors": [repr(a) for a in answers]},
            )
            return False
        self._conclude(bool(answers[-1]))
        return True

    def _conclude(self, acked: bool) -> None:
        """Its ack answered: recorded when acked; when the fence refused it (another worker
        claimed the batch meanwhile), counted as a late result and nothing else."""
        self.settled = True
        if acked:
            self.record()
        else:
            self.recorded = True
            self.late()

    def record(self) -> None:
        """The batch's Prometheus series and trace spans, once (an outcome whose write on the
        reading connection failed is sent again through the pool)."""
        if self.recorded:
            return
        self.recorded = True
        name, version, stats = self.model, self.version, self.stats
        if self.ran and "execution_count" in stats:
            metrics.record_batch(name, version, stats)
        if self.direct_level is not None:
            metrics.record_direct(name, version, self.direct_level, self.direct_queue_ns)
        if self.unrun:
            metrics.record_failures(name, version, metrics.REJECTED, self.unrun)
        if stats.get("cancel_count"):
            metrics.record_failures(name, version, metrics.CANCELED, stats["cancel_count"])
        if tracing.ENABLED:
            ended_ns = time.time_ns()
            for request in self.requests:
                if request.trace:
                    tracing.record(
                        "conch.worker.reply",
                        request.trace,
                        self.published_ns,
                        ended_ns,
                        {"worker": self.worker},
                    )

    def late(self) -> None:
        """The fence refused the ack: another worker claimed the batch while this one was
        frozen; its outcome counts, not ours."""
        metrics.record_late_result("worker", self.model, self.version)
        log.warning(
            "batch no longer owned by this worker; its ack and statistics dropped",
            extra={
                "model": self.model,
                "version": self.version,
                "entry": self.entry.entry_id.decode(),
            },
        )
