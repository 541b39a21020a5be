"""The fleet's shared state in on_demand model control mode: demand, placements, residents.

Three writers, one reader of everything (the placer, ``scheduler.placement``):

- a gateway that gets a request for an indexed model with no live version records the model's
  demand (:func:`demand`: HSETNX, so a thousand first requests through several gateways leave
  one record) and announces it; the request then waits for the model to be ready;
- the placer picks a worker, records the load in progress (:class:`Placement`) and sends that
  worker a targeted LOAD (``shared.fleet.control.send``); when the model is ready, or its load
  failed, the demand and placement are removed. A placement whose worker died or whose load
  outlived ``load_timeout`` is placed again elsewhere: nothing stays LOADING;
- each worker publishes its budget (heartbeat info ``budget_bytes``) and what it holds
  (:class:`Resident` per model, :func:`queue_resident` on its heartbeat), so the placer sees
  memory and use without asking.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
import redis.asyncio as aioredis

from shared.fleet import change_feed
from shared.runtime import clock
from shared.wire import keys

# Why a model was loaded or unloaded (the ``reason`` label of the load and unload counters).
LOAD_DEMAND = "demand"  # its first request found it not loaded
LOAD_COPY = "copy"  # its backlog outgrew its copies
LOAD_RETRY = "retry"  # the worker that was loading it died or timed out
LOAD_PINNED = "pinned"  # --load-model or the repository API
UNLOAD_EVICTED = "evicted"  # another model needed the memory
UNLOAD_IDLE = "idle"  # a copy idle for --model-idle-unload-seconds
UNLOAD_API = "api"  # the repository API


class Placement(msgspec.Struct, frozen=True, kw_only=True):
    """A load the placer has sent and not yet seen end."""

    worker: str
    started_ms: int
    reason: str = LOAD_DEMAND
    # Workers tried before this one (died or failed there): not chosen again.
    tried: list[str] = []
    message_id: str = ""


class Resident(msgspec.Struct, frozen=True, kw_only=True):
    """One model a worker holds (every loaded version together)."""

    bytes: int
    last_used_ms: int
    pinned: bool = False
    in_flight: int = 0
    live_sequences: int = 0
    # Requests one copy executes at once (instances x max(max_batch_size, 1)).
    capacity: int = 1


_encode = msgspec.json.encode
_decode_placement = msgspec.json.Decoder(Placement).decode
_decode_resident = msgspec.json.Decoder(Resident).decode


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def demand(r: aioredis.Redis, model: str) -> bool:
    """Record that ``model`` is wanted and wake the placer; True if this call recorded it (the
    first since the model's last placement ended)."""
    first = bool(await r.hsetnx(keys.demand(), model, clock.now_ms()))
    if first:
        await change_feed.announce(r, change_feed.DEMAND)
    return first


async def read_demands(r: aioredis.Redis) -> dict[str, int]:
    raw = await r.hgetall(keys.demand())
    return {_text(k): int(v) for k, v in raw.items()}


async def read_placements(r: aioredis.Redis) -> dict[str, Placement]:
    raw = await r.hgetall(keys.placements())
    return {_text(k): _decode_placement(v) for k, v in raw.items()}


async def write_placement(r: aioredis.Redis, model: str, placement: Placement) -> None:
    await r.hset(keys.placements(), model, _encode(placement))


async def end_placement(r: aioredis.Redis, model: str) -> None:
    """The model's load ended (ready or failed): a later miss is a new demand."""
    async with r.pipeline(transaction=True) as pipe:
        pipe.hdel(keys.placements(), model)
        pipe.hdel(keys.demand(), model)
        await pipe.execute()


async def record_measured(r: aioredis.Redis, model: str, size: int) -> None:
    """A load's measured bytes: the placer's estimate for the model's next load."""
    await r.hset(keys.model_bytes(), model, size)


async def read_measured(r: aioredis.Redis) -> dict[str, int]:
    raw = await r.hgetall(keys.model_bytes())
    return {_text(k): int(v) for k, v in raw.items()}


def queue_resident(pipe: Any, worker: str, resident: Mapping[str, Resident], ttl_ms: int) -> None:
    """Replace the worker's resident set on a (heartbeat) pipeline; it expires with the worker."""
    key = keys.resident(worker)
    pipe.delete(key)
    if resident:
        pipe.hset(key, mapping={m: _encode(r) for m, r in resident.items()})
        pipe.pexpire(key, ttl_ms)


async def read_resident(r: aioredis.Redis, workers: list[str]) -> dict[str, dict[str, Resident]]:
    """Per worker: model -> what it holds (empty for a worker that published nothing)."""
    if not workers:
        return {}
    async with r.pipeline(transaction=False) as pipe:
        for worker in workers:
            pipe.hgetall(keys.resident(worker))
        replies = await pipe.execute()
    return {
        worker: {_text(k): _decode_resident(v) for k, v in raw.items()}
        for worker, raw in zip(workers, replies, strict=True)
    }
