"""Sending a batch: one script puts it on the batch stream and takes its requests off theirs.

The script (``shared/lua/dispatch.lua``) first checks that every chosen request entry is
still pending for this scheduler, then adds the batch and acks and deletes the entries, all or
nothing: a request is either still queued or in exactly one batch. A dispatch sent twice (redis-py
repeats a command whose connection dropped after it went out) finds its entries gone the second
time and adds nothing; a scheduler that was frozen while another claimed its entries cannot send
them again. The same script returns the batch stream's length: the backlog the workers have yet
to take.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

from scheduler.queueing.pending import Pending
from shared import lua
from shared.fleet import durability
from shared.fleet.fencing import dispatch_args
from shared.runtime import tracing
from shared.runtime.ids import new_id
from shared.wire import envelope
from shared.wire.envelope import Batch, RequestHeader

_DISPATCH_SHA = lua.DISPATCH.sha


@dataclass
class Sent:
    # The batch stream's length after the dispatch (when sent).
    backlog: int = 0
    # Chosen requests that are no longer this scheduler's: nothing was sent.
    not_ours: list[Pending] = field(default_factory=list)


def new_batch(model: str, version: int, chosen: list[Pending]) -> Batch:
    """The batch of the chosen requests, with each one's time in the queue so far."""
    now_ns = time.time_ns()
    return Batch(
        batch_id=new_id(),
        model=model,
        version=version,
        formed_ms=now_ns // 1_000_000,
        requests=[p.data for p in chosen],
        queue_ns=[max(0, now_ns - enqueued_ns(p.header)) for p in chosen],
    )


def enqueued_ns(header: RequestHeader) -> int:
    """The request's admission on the wall clock, to the microsecond where its header says."""
    if header.enqueued_us:
        return header.enqueued_us * 1000
    return header.enqueued_ms * 1_000_000


async def send(
    r: aioredis.Redis, batch_stream: str, batch: Batch, chosen: list[Pending], consumer: str
) -> Sent:
    """Send the batch (one script, one round trip) unless some request is no longer ours."""
    by_stream: dict[bytes, list[bytes]] = defaultdict(list)
    for p in chosen:
        by_stream[p.stream].append(p.entry_id)
    script_keys, args = dispatch_args(batch_stream, consumer, envelope.encode(batch), by_stream)
    wait = durability.of(r)
    if wait is not None:
        result = await _send_and_wait(r, wait, script_keys, args)
    else:
        try:
            result = await r.evalsha(_DISPATCH_SHA, len(script_keys), *script_keys, *args)
        except NoScriptError:  # a Redis restarted or flushed: the full text once, cached again
            result = await r.eval(lua.DISPATCH.source, len(script_keys), *script_keys, *args)
    if int(result[0]) >= 0:
        return Sent(backlog=int(result[0]))
    streams = list(by_stream)
    missing = {
        (streams[int(result[i]) - 1], bytes(result[i + 1])) for i in range(1, len(result), 2)
    }
    return Sent(not_ours=[p for p in chosen if (p.stream, p.entry_id) in missing])


async def _send_and_wait(
    r: aioredis.Redis, wait: tuple[int, int], script_keys: list[Any], args: list[Any]
) -> Any:
    """The dispatch script and a WAIT on the same connection (``shared.fleet.durability``)."""
    for _ in range(2):
        async with r.pipeline(transaction=False) as pipe:
            pipe.execute_command("EVALSHA", _DISPATCH_SHA, len(script_keys), *script_keys, *args)
            waits = durability.queue_wait(pipe, wait, script_keys[:1])
            results = await pipe.execute(raise_on_error=False)
        if isinstance(results[0], NoScriptError):
            await r.script_load(lua.DISPATCH.source)
            continue
        durability.check(results[-waits:], wait, "dispatch")
        if isinstance(results[0], Exception):
            raise results[0]
        return results[0]
    raise NoScriptError("the dispatch script could not be loaded")


def trace_queued(model: str, version: int, chosen: list[Pending], queue_ns: list[int]) -> None:
    """One span per traced request: its time in the queue, ending now."""
    now_ns = time.time_ns()
    for p, ns in zip(chosen, queue_ns, strict=True):
        tracing.record(
            "conch.scheduler.queue",
            tracing.decode_trace(p.data),
            now_ns - ns,
            now_ns,
            {"model": model, "version": version, "priority": p.header.priority},
        )
