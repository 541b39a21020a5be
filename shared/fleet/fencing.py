"""Fenced writes: a consumer acts on a stream entry only while it still owns it.

Ownership of an entry is the consumer group's pending list: the entry is the consumer's while
``XPENDING <stream> <group> <id> <id> 1 <consumer>`` lists it. Once another consumer claims it
(``XCLAIM`` with a min-idle bound, after the owner's heartbeat is older than the dead bound), the
old owner's ack, statistics and dispatch are refused by these scripts, atomically: a late owner
gets 0 back, counts a late result, and does nothing else. Each script replaces the commands it
fences (no extra round trip), touches the keys of one model only (one hash tag, one Redis
Cluster slot), and is safe to run twice: redis-py sends a pipeline again when its connection drops
after the pipeline went out, and a second run finds nothing left to do.

Replies to the gateways are separate commands before the fenced ack (a gateway's reply stream
lives in another slot); the gateway keeps the first reply per request id. Inside each script the
writes that may be refused (out of memory: XADD, HINCRBY) come before the ack and delete, so a
script that fails half-way has taken nothing off its stream.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from redis.asyncio.client import Pipeline
from redis.typing import EncodableT, KeyT

from shared import lua
from shared.wire import keys

# The scripts, with their KEYS, ARGV and replies: shared/lua/fenced_ack.lua (one entry),
# fenced_ack_many.lua (entries of several streams, counted as failures) and dispatch.lua.


def queue_fenced_ack(
    pipe: Pipeline,
    stream: str | bytes,
    stats_key: str,
    group: str,
    consumer: str,
    entry_id: bytes,
    done_channel: str = "",
    counters: Mapping[str, int] | None = None,
    last_inference_ms: int = 0,
    batch_size: int = 0,
) -> None:
    """Queue the fenced ack of one entry (its answer is 1: acked, or 0: no longer ours).

    EVAL with the source rather than EVALSHA: a pipeline then never meets NOSCRIPT after a
    Redis restart, and Redis caches the compiled script by its digest anyway."""
    args: list[EncodableT] = [
        group,
        consumer,
        entry_id,
        done_channel,
        last_inference_ms,
        batch_size,
    ]
    for field, amount in (counters or {}).items():
        args.extend((field, amount))
    pipe.eval(lua.FENCED_ACK.source, 2, stream, stats_key, *args)


def queue_fenced_ack_many(
    pipe: Pipeline,
    stats_key: str,
    group: str,
    consumer: str,
    ids_by_stream: Mapping[bytes, Sequence[bytes]],
) -> None:
    """Queue the fenced ack of entries of several streams of one model, counted as failures
    (the scheduler answering requests with an error); the answer is how many were acked."""
    args: list[EncodableT] = [group, consumer]
    for ids in ids_by_stream.values():
        args.append(len(ids))
        args.extend(ids)
    pipe.eval(lua.FENCED_ACK_MANY.source, 1 + len(ids_by_stream), stats_key, *ids_by_stream, *args)


def dispatch_args(
    batch_stream: str, consumer: str, batch: bytes, ids_by_stream: Mapping[bytes, Sequence[bytes]]
) -> tuple[list[KeyT], list[EncodableT]]:
    """The keys and arguments of the dispatch script (``lua.DISPATCH``) for one batch."""
    args: list[EncodableT] = [keys.SCHEDULER_GROUP, consumer, batch]
    for ids in ids_by_stream.values():
        args.append(len(ids))
        args.extend(ids)
    return [batch_stream, *ids_by_stream], args
