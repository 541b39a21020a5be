"""Publishing replies to the gateways' reply streams (used by schedulers and workers alike)."""

from __future__ import annotations

from collections.abc import Iterable

from redis.asyncio.client import Pipeline
from redis.typing import EncodableT

from shared import lua
from shared.wire import envelope, keys
from shared.wire.envelope import Reply

# A reply stream is read as it fills; these bound it if its gateway is gone.
REPLY_MAXLEN = 10_000
REPLY_TTL_MS = 60_000


def queue_replies(pipe: Pipeline, replies: Iterable[tuple[str, Reply]]) -> None:
    """One stream entry per reply stream, holding every reply of this batch for it.

    A batch of 64 requests from two gateway processes becomes two XADDs, not 64: fewer Redis
    commands for the worker and fewer entries for each gateway's reply reader.
    """
    by_stream: dict[str, list[Reply]] = {}
    for reply_to, reply in replies:
        by_stream.setdefault(reply_to, []).append(reply)
    for stream, group in by_stream.items():
        pipe.xadd(
            stream,
            {keys.FIELD_DATA: envelope.encode(group)},
            maxlen=REPLY_MAXLEN,
            approximate=True,
        )
        if keys.is_gateway_reply_stream(stream):
            pipe.pexpire(stream, REPLY_TTL_MS)


def add_stats(pipe: Pipeline, key: str, counters: dict[str, int], last_inference_ms: int) -> None:
    """Add a batch's statistics counters to the (model, version) hash the gateways read: every
    counter in one command (a dozen HINCRBYs cost a dozen commands to pack, send and run); EVAL
    with the source (shared/lua/add_stats.lua), so no script cache is needed."""
    args: list[EncodableT] = [last_inference_ms]
    for field, amount in counters.items():
        args.extend((field, amount))
    pipe.eval(lua.ADD_STATS.source, 1, key, *args)
