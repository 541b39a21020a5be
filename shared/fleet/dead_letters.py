"""Dead letters: entries that cannot be decoded or executed leave their stream for the model's
dead-letter stream, instead of being retried forever and pinning a consumer.

A poison entry (a batch that does not decode, one whose workers keep failing or dying, a request
entry with a malformed header, one that schedulers kept dying on) is answered with an error to
each request that can be identified, then moved: one script on the model's slot checks that the
consumer still owns the entry (``shared.fleet.fencing``), copies its fields with the reason to
``conch:m:{model}:dead`` (capped), acks and deletes it. Operators read the stream to see what
failed and why (``XRANGE conch:m:{<model>}:dead - +``); each move is counted and logged with the
request ids.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import msgspec
import redis.asyncio as aioredis

from shared import lua, metrics
from shared.fleet.publish import queue_replies
from shared.wire import envelope, keys
from shared.wire.envelope import Reply

log = logging.getLogger(__name__)

# Entries kept per model's dead-letter stream (approximately: MAXLEN ~).
DEAD_LETTERS_MAXLEN = 10_000


def identify(raw: bytes | None) -> tuple[str, str] | None:
    """(request id, reply stream) of an encoded request that may not decode as a whole: the
    request is an array whose first element is its id and seventh its reply stream."""
    if raw is None:
        return None
    try:
        request = envelope.decode_request(raw)
        return request.id, request.reply_to
    except Exception:  # poison, by definition: take what can be read
        pass
    try:
        loose = msgspec.msgpack.decode(raw)
        if isinstance(loose, list) and len(loose) > 6:
            request_id, reply_to = loose[0], loose[6]
            if isinstance(request_id, str) and isinstance(reply_to, str) and reply_to:
                return request_id, reply_to
    except Exception:
        pass
    return None


async def move(
    r: aioredis.Redis,
    *,
    stage: str,
    model: str,
    version: int,
    stream: str | bytes,
    group: str,
    consumer: str,
    entry_id: bytes,
    reason: str,
    answers: Iterable[tuple[str, Reply]] = (),
    done_channel: str = "",
) -> bool:
    """Answer the identifiable requests with an error, then move the entry to the dead-letter
    stream (shared/lua/dead_letter.lua); one round trip. False: the entry was not this
    consumer's any more."""
    replies = list(answers)
    async with r.pipeline(transaction=False) as pipe:
        queue_replies(pipe, replies)
        pipe.eval(
            lua.DEAD_LETTER.source,
            3,
            keys.dead_letters(model),
            stream,
            keys.stats(model, version),
            group,
            consumer,
            entry_id,
            reason,
            DEAD_LETTERS_MAXLEN,
            len(replies),
            done_channel,
        )
        results = await pipe.execute()
    moved = bool(results[-1])
    text = stream.decode() if isinstance(stream, bytes) else stream
    if moved:
        metrics.record_dead_letter(stage, model, version)
        if replies:
            metrics.record_failures(model, version, metrics.OTHER, len(replies))
        log.error(
            "entry moved to the dead-letter stream",
            extra={
                "model": model,
                "version": version,
                "stream": text,
                "entry": entry_id.decode(),
                "reason": reason,
                "request_ids": [reply.id for _, reply in replies],
            },
        )
    else:
        metrics.record_late_result(stage, model, version)
        log.warning(
            "poison entry is no longer ours; left to its owner",
            extra={"model": model, "stream": text, "entry": entry_id.decode()},
        )
    return moved
