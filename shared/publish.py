"""Publishing replies to the gateways' reply streams (used by schedulers and workers alike)."""

from __future__ import annotations

from collections.abc import Iterable

from redis.asyncio.client import Pipeline

from shared import envelope, keys
from shared.envelope import Reply

# A reply stream is read as it fills; these bound it if its gateway is gone.
REPLY_MAXLEN = 10_000
REPLY_TTL_MS = 60_000


def queue_replies(pipe: Pipeline, replies: Iterable[tuple[str, Reply]]) -> None:
    """Add each (reply stream, reply) to the pipeline; each stream's expiry is refreshed once."""
    streams: set[str] = set()
    for reply_to, reply in replies:
        pipe.xadd(
            reply_to,
            {keys.FIELD_DATA: envelope.encode(reply)},
            maxlen=REPLY_MAXLEN,
            approximate=True,
        )
        streams.add(reply_to)
    for stream in streams:
        pipe.pexpire(stream, REPLY_TTL_MS)
