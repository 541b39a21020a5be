"""Taking a request its client cancelled out of the scheduler's queue at once.

Gateways announce each cancellation on ``keys.cancel_channel()`` (``shared.fleet.cancel_listener``).
The scheduler hears it and removes the request from the queue that holds it, as Triton's
scheduler does: it is answered ``CANCELLED`` (nobody waits for the answer, but a retried
request id gets one), its entry is acked and deleted from its request stream if this scheduler
still owns it, and it is counted once (``cancel_count`` in the stats hash, Triton's
``nv_inference_request_failure{reason="CANCELED"}``). The requests behind it move up; it never
holds a place until a worker would reach it.

A cancellation heard before its request was read from its stream is remembered for a while
(``CancelledRequests``): the request is taken out when it arrives. One missed while the
subscription was down is still caught by the worker that would run it
(``workers.batches.cancel_check``).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping

import redis.asyncio as aioredis
from redis.typing import EncodableT

from shared import lua, metrics
from shared.fleet.cancel_listener import CancelledRequests, follow
from shared.fleet.cancel_marks import CANCELLED_TEXT
from shared.fleet.publish import queue_replies
from shared.wire import envelope, keys
from shared.wire.envelope import RequestHeader
from shared.wire.errors import ErrorCode

log = logging.getLogger(__name__)


async def answer_cancelled(
    r: aioredis.Redis,
    model: str,
    version: int,
    items: list[tuple[RequestHeader, bytes, bytes]],
    consumer: str,
) -> int:
    """Answer ``(header, stream, entry id)`` requests CANCELLED, take them off their streams and
    count them; returns how many were still this scheduler's."""
    by_stream: dict[bytes, list[bytes]] = defaultdict(list)
    for _, stream, entry_id in items:
        by_stream[stream].append(entry_id)
    args: list[EncodableT] = [keys.SCHEDULER_GROUP, consumer]
    for ids in by_stream.values():
        args.append(len(ids))
        args.extend(ids)
    async with r.pipeline(transaction=False) as pipe:
        queue_replies(
            pipe,
            (
                (
                    h.reply_to,
                    envelope.error_reply(
                        h.id, model, version, ErrorCode.CANCELLED.value, CANCELLED_TEXT
                    ),
                )
                for h, _, _ in items
            ),
        )
        stats = keys.stats(model, version)
        # shared/lua/cancel_ack.lua: acks, deletes and counts those still this consumer's.
        pipe.eval(lua.CANCEL_ACK.source, 1 + len(by_stream), stats, *by_stream, *args)
        results = await pipe.execute()
    acked = int(results[-1])
    if acked:
        metrics.record_failures(model, version, metrics.CANCELED, acked)
    log.info(
        "cancelled requests taken out of the queue",
        extra={"model": model, "version": version, "request_ids": [h.id for h, _, _ in items]},
    )
    return acked


class Cancellable:
    """What a queue offers: take this request out if it holds it."""

    model: str

    def cancel(self, request_id: str) -> None: ...


class SchedulerCancels:
    """Hears cancellations and hands each to the queues of its model."""

    def __init__(self, queues: Mapping[tuple[str, int], object]):
        self._queues = queues
        self.heard = CancelledRequests()

    def on_heard(self, model: str, request_id: str) -> None:
        for queue in _queues_of(self._queues.items(), model):
            queue.cancel(request_id)

    async def run(self, redis_url: str) -> None:
        await follow(redis_url, self.heard, self.on_heard, name="conch-scheduler-cancels")

    def attach(self) -> Callable[[str], bool]:
        """What a queue asks when a request arrives: was it cancelled already?"""
        return self.heard.__contains__


def _queues_of(items: Iterable[tuple[tuple[str, int], object]], model: str) -> list[Cancellable]:
    return [
        queue  # type: ignore[misc]  # an object with a cancel method: a Cancellable
        for (name, _), queue in list(items)
        if name == model and callable(getattr(queue, "cancel", None))
    ]
