"""Cancelling a request of a sequence ends the sequence, as in Triton.

The holder asks before it runs the head steps of its sequences (what the worker's cancel
listener heard, and one MGET only for steps it may have missed: ``workers.batches.cancel_check``),
and again after an execution for the steps that ran (what was heard meanwhile). A cancelled step's
sequence is released in one script (``shared/lua/sequence_cancel.lua``): binding, committed
state and queued steps go; its slot goes to the oldest backlogged sequence (one more script,
``sequence_pull.lua``, when the backlog is not empty). The cancelled step,
if it had not run, is answered CANCELLED and counted (``cancel`` in the statistics, once); the
steps queued behind it are answered with Triton's error for a sequence that is not open (they
lack START), as is every later request of that correlation id without START (the gateway's
admission finds no binding).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

import redis.asyncio as aioredis

from shared import lua, metrics
from shared.fleet.cancel_listener import CancelledRequests
from shared.fleet.cancel_marks import CANCELLED_TEXT
from shared.fleet.publish import queue_replies
from shared.wire import envelope, keys, sequence_params
from shared.wire.envelope import InferRequest, Reply
from shared.wire.errors import ErrorCode
from workers.batches.cancel_check import WAITED_MS, cancelled_ids
from workers.sequence.store import Head, SequenceStore

log = logging.getLogger(__name__)


class SequenceCancels:
    def __init__(
        self,
        r: aioredis.Redis,
        store: SequenceStore,
        heard: CancelledRequests | None,
        idle_ms: int,
        slots: int,
    ):
        self._redis = r
        self._store = store
        self.heard = heard if heard is not None else CancelledRequests()
        self._idle_ms, self._slots = idle_ms, slots
        self._script = r.register_script(lua.SEQUENCE_CANCEL.source)

    async def drop(self, chosen: list[Head | None], forget: Callable[[str], None]) -> list[Any]:
        """The execution's heads without those cancelled before they ran (their sequences
        ended and forgotten: ``None`` in their place, a padding slot)."""
        ended = await self.before_run([h for h in chosen if h is not None])
        for sequence in ended:
            forget(sequence)
        return [None if h is None or h.sequence in ended else h for h in chosen]

    async def after_run(self, ran: list[Head | None], forget: Callable[[str], None]) -> None:
        """End the sequences whose step was cancelled while it ran (it ran and committed)."""
        for head in self.cancelled_meanwhile(h for h in ran if h is not None):
            forget(head.sequence)
            await self.end(head.sequence, head.request, ran=True)

    async def before_run(self, heads: Iterable[Head]) -> set[str]:
        """End the sequences whose head step was cancelled before it ran; returns them."""
        heads = list(heads)
        cancelled = [h for h in heads if h.request.id in self.heard]
        now_ms = time.time() * 1000
        unsure = [
            h
            for h in heads
            if h not in cancelled
            and now_ms - h.request.enqueued_ms >= WAITED_MS
            and not self.heard.heard_all_since(h.request.enqueued_ms)
        ]
        if unsure:
            try:
                found = await cancelled_ids(
                    self._redis, self._store.model, [h.request.id for h in unsure]
                )
            except Exception:
                log.warning("could not read cancel keys", exc_info=True)
                found = set()
            cancelled += [h for h in unsure if h.request.id in found]
        for head in cancelled:
            await self.end(head.sequence, head.request, ran=False)
        return {h.sequence for h in cancelled}

    def cancelled_meanwhile(self, heads: Iterable[Head]) -> list[Head]:
        """The steps of an execution whose clients cancelled while it ran (heard only)."""
        return [h for h in heads if h.request.id in self.heard]

    async def end(self, sequence: str, cancelled: InferRequest, ran: bool) -> None:
        """Release the sequence; answer the cancelled step (if it did not run) and the steps
        queued behind it."""
        store = self._store
        now_ms = int(time.time() * 1000)
        waiting = store.waiting  # the backlog's oldest as last read: the slot goes to them
        args: list[int | str] = [now_ms, store.instance, self._idle_ms, self._slots]
        args += [int(not ran), sequence, len(waiting), *waiting]
        entries, got, named = await self._script(
            keys=[
                *store.own_keys,
                keys.stats(store.model, store.version),
                *keys.sequence_keys(store.model, store.version, [sequence]),
                *store.bindings(waiting),
            ],
            args=args,
        )
        # The freed slot: backlogged sequences it could not take for want of their keys.
        await store.pull_more(int(got), named, now_ms, self._idle_ms, self._slots)
        replies: list[tuple[str, Reply]] = []
        for raw in entries:
            request = envelope.decode_request(raw.partition(b":")[2])
            if request.id == cancelled.id:
                if not ran:
                    replies.append((request.reply_to, _reply(request, "CANCELLED")))
                continue
            replies.append((request.reply_to, _reply(request, "ENDED")))
        if replies:
            async with self._redis.pipeline(transaction=False) as pipe:
                queue_replies(pipe, replies)
                await pipe.execute()
        if entries and not ran:
            metrics.record_failures(store.model, store.version, metrics.CANCELED, 1)
        metrics.record_sequence_event(store.model, store.version, "ended")
        log.info(
            "sequence ended: a request of it was cancelled",
            extra={"model": store.model, "sequence": sequence, "request": cancelled.id},
        )


def _reply(request: InferRequest, why: str) -> Reply:
    label = sequence_params.lenient(request.parameters)
    if why == "CANCELLED":
        code, message = ErrorCode.CANCELLED, CANCELLED_TEXT
    elif label.start:  # queued behind the cancelled step as the start of a new sequence
        code = ErrorCode.UNAVAILABLE
        message = (
            f"sequence {label.label()} of model '{request.model}' was ended because a request "
            "of it was cancelled before this START ran; send it again"
        )
    else:
        code = ErrorCode.INVALID_ARG
        message = (
            f"inference request for sequence {label.label()} to model '{request.model}' must "
            "specify the START flag on the first request of the sequence"
        )
    return envelope.error_reply(request.id, request.model, request.version, code.value, message)
