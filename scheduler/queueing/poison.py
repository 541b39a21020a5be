"""Request entries the scheduler cannot queue: answered with an error, never left pending.

An entry whose header is missing or does not decode, or that schedulers kept dying on (more
deliveries than ``max_deliveries``), is answered with an error where its request can be
identified and moved to the model's dead-letter stream (``shared.fleet.dead_letters``). An entry of
a version this scheduler no longer serves is answered with an error and taken off its stream.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from scheduler.queueing.error_answers import answer_errors
from shared.fleet import dead_letters, streams
from shared.wire import envelope, keys
from shared.wire.envelope import Reply, RequestHeader
from shared.wire.errors import ErrorCode


def _answers(
    entry: streams.Entry, model: str, version: int, reason: str
) -> list[tuple[str, Reply]]:
    """Who asked: from the header when it decodes, else from the request payload."""
    who: tuple[str, str] | None = None
    try:
        header = envelope.decode_header(entry.fields[keys.FIELD_HEADER])
        who = (header.id, header.reply_to)
    except Exception:
        who = dead_letters.identify(entry.fields.get(keys.FIELD_DATA))
    if who is None:
        return []
    request_id, reply_to = who
    return [(reply_to, envelope.error_reply(request_id, model, version, "INTERNAL", reason))]


async def dead_letter(
    r: aioredis.Redis,
    model: str,
    version: int,
    entry: streams.Entry,
    consumer: str,
    reason: str,
) -> bool:
    """Answer the entry's request (if it can be identified) and move it to the dead letters."""
    return await dead_letters.move(
        r,
        stage="scheduler",
        model=model,
        version=version,
        stream=entry.stream,
        group=keys.SCHEDULER_GROUP,
        consumer=consumer,
        entry_id=entry.entry_id,
        reason=reason,
        answers=_answers(entry, model, version, reason),
    )


async def answer_unserved(
    r: aioredis.Redis, model: str, version: int, entry: streams.Entry, consumer: str
) -> None:
    """An entry of a version no longer served (read while its queue was retired)."""
    message = f"model '{model}' version {version} is no longer served"
    try:
        header = envelope.decode_header(entry.fields[keys.FIELD_HEADER])
    except Exception:
        await dead_letter(r, model, version, entry, consumer, message)
        return
    items: list[tuple[RequestHeader, bytes, bytes]] = [(header, entry.stream, entry.entry_id)]
    await answer_errors(r, model, version, items, [message], ErrorCode.UNAVAILABLE, consumer)
