"""Batches a worker cannot run: answered with an error and moved to the dead letters.

A batch that does not decode, or that was delivered more than ``max_deliveries`` times (its
workers kept failing or dying on it), is never tried again: each of its requests that can be
identified gets an error, and the entry moves to the model's dead-letter stream with the reason
(``shared.fleet.dead_letters``). The check comes before decoding, so an undecodable batch cannot
loop.
"""

from __future__ import annotations

import logging

import redis.asyncio as aioredis

from shared.fleet import dead_letters, streams
from shared.wire import batch_entry, envelope, keys
from shared.wire.envelope import Reply
from shared.wire.errors import ErrorCode

log = logging.getLogger(__name__)


def _answers(
    entry: streams.Entry, model: str, version: int, message: str
) -> list[tuple[str, Reply]]:
    """An error for each request of the batch that can be identified."""
    try:
        raws = batch_entry.decode(entry.fields, entry.entry_id, model, version).requests
    except Exception:
        return []
    answers = []
    for raw in raws:
        who = dead_letters.identify(raw)
        if who is not None:
            request_id, reply_to = who
            reply = envelope.error_reply(
                request_id, model, version, ErrorCode.INTERNAL.value, message
            )
            answers.append((reply_to, reply))
    return answers


async def dead_letter(
    r: aioredis.Redis,
    model: str,
    version: int,
    entry: streams.Entry,
    consumer: str,
    reason: str,
) -> bool:
    """Answer what can be identified, move the batch to the dead letters, announce it done."""
    message = f"{reason} (batch {entry.entry_id.decode()} moved to the dead-letter stream)"
    return await dead_letters.move(
        r,
        stage="worker",
        model=model,
        version=version,
        stream=entry.stream,
        group=keys.WORKER_GROUP,
        consumer=consumer,
        entry_id=entry.entry_id,
        reason=reason,
        answers=_answers(entry, model, version, message),
        done_channel=keys.batch_done_channel(model, version),
    )
