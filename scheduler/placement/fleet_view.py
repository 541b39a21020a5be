"""One read of everything the placer decides from (``shared.placement.decide.Fleet``).

A handful of round trips per tick, each a HGETALL or a pipeline: demand, placements, the
repository index, measured sizes and load errors; live workers with their heartbeat info and
resident sets; live schedulers' backlogs; readiness of the models demanded; answers to the
loads in progress. A value one writer garbles (a worker of another release) is skipped, not
fatal: the placer keeps placing the rest.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import redis.asyncio as aioredis

from scheduler.queueing.version_queue import VersionQueue
from shared.fleet import control, heartbeats, on_demand, readiness
from shared.fleet.control import ControlAck, IndexEntry
from shared.placement.decide import Fleet, WorkerInfo
from shared.runtime import clock
from shared.wire import keys

log = logging.getLogger(__name__)

# The scheduler heartbeat info field with its VersionQueue lengths per model (JSON).
BACKLOG_FIELD = "backlog"


def backlog_info(queues: Mapping[tuple[str, int], object]) -> str:
    """A scheduler's heartbeat field: requests waiting in its VersionQueues per model (JSON).
    Called on the heartbeat thread: the dict is copied in one step (under the GIL) first."""
    waiting: dict[str, int] = {}
    for (model, _), queue in list(queues.items()):
        if isinstance(queue, VersionQueue) and len(queue):
            waiting[model] = waiting.get(model, 0) + len(queue)
    return json.dumps(waiting, separators=(",", ":"))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def _infos(r: aioredis.Redis, kind: str, ids: list[str]) -> list[dict[str, str]]:
    if not ids:
        return []
    async with r.pipeline(transaction=False) as pipe:
        for service in ids:
            pipe.hgetall(keys.service_info(kind, service))
        replies = await pipe.execute()
    return [{_text(k): _text(v) for k, v in raw.items()} for raw in replies]


async def read_workers(r: aioredis.Redis) -> dict[str, WorkerInfo]:
    """Live workers (heartbeat not expired) and what their heartbeat says they serve."""
    ids = sorted(await heartbeats.live_ids(r, "worker"))
    found: dict[str, WorkerInfo] = {}
    for worker, info in zip(ids, await _infos(r, "worker", ids), strict=True):
        try:
            budget = int(info.get("budget_bytes") or 0)
        except ValueError:
            budget = 0
        found[worker] = WorkerInfo(backend=info.get("backend", ""), budget_bytes=budget)
    return found


async def read_backlog(r: aioredis.Redis) -> dict[str, int]:
    """Requests waiting per model, summed over the live schedulers' heartbeats."""
    ids = sorted(await heartbeats.live_ids(r, "scheduler"))
    total: dict[str, int] = {}
    for info in await _infos(r, "scheduler", ids):
        try:
            counts = json.loads(info.get(BACKLOG_FIELD) or "{}")
            for model, waiting in counts.items():
                total[str(model)] = total.get(str(model), 0) + int(waiting)
        except (ValueError, TypeError, AttributeError):
            continue
    return total


async def read_acks(
    r: aioredis.Redis, placements: dict[str, on_demand.Placement]
) -> dict[str, list[ControlAck]]:
    """The answers to each placement's message, read without taking them: the placer deletes
    them when it ends or moves the placement, so an answer survives a tick that failed."""
    pending = [(m, p.message_id) for m, p in sorted(placements.items()) if p.message_id]
    if not pending:
        return {}
    async with r.pipeline(transaction=False) as pipe:
        for _, message_id in pending:
            pipe.lrange(keys.control_acks(message_id), 0, -1)
        replies = await pipe.execute()
    acks: dict[str, list[ControlAck]] = {}
    for (model, _), raw in zip(pending, replies, strict=True):
        for item in raw:
            try:
                acks.setdefault(model, []).append(control.decode_ack(item))
            except Exception:
                log.warning("unreadable control answer", extra={"model": model})
    return acks


def _ready(versions: dict[str, dict[int, int]]) -> frozenset[str]:
    return frozenset(m for m, found in versions.items() if any(n > 0 for n in found.values()))


async def _models(
    r: aioredis.Redis, models: list[str], demanded: list[str]
) -> tuple[dict[str, IndexEntry], dict[str, int], dict[str, int]]:
    """Index entries and measured sizes of ``models``, load error times of ``demanded``: only
    the models a decision may place (the index holds every model of the repositories)."""
    async with r.pipeline(transaction=False) as pipe:
        pipe.hmget(keys.repository_index(), models or ["-"])
        pipe.hmget(keys.model_bytes(), models or ["-"])
        pipe.hmget(keys.load_errors(), demanded or ["-"])
        index_raw, measured_raw, errors_raw = await pipe.execute()
    index = {m: control.decode_index(v) for m, v in zip(models, index_raw, strict=False) if v}
    measured = {m: int(v) for m, v in zip(models, measured_raw, strict=False) if v}
    errors: dict[str, int] = {}
    for model, raw in zip(demanded, errors_raw, strict=False):
        if raw:
            try:
                errors[model] = int(json.loads(raw).get("ms", 0))
            except (ValueError, AttributeError, TypeError):
                errors[model] = 0
    return index, measured, errors


async def read_fleet(
    r: aioredis.Redis, unloading: Iterable[tuple[str, str]] = (), every_resident: bool = False
) -> Fleet:
    """The fleet as one tick decides from. Index entries are read for the models demanded or
    being placed, and those held that may want a copy (busy; all of them where
    ``every_resident``: min_copies above 1 wants copies without traffic)."""
    demands = await on_demand.read_demands(r)
    placements = await on_demand.read_placements(r)
    workers = await read_workers(r)
    resident = await on_demand.read_resident(r, list(workers))
    backlog = await read_backlog(r)
    held = {m for models in resident.values() for m in models}
    # Requests queued for a model no live worker holds (admitted as it was unloaded) are a
    # demand too: else they would wait in a queue with no instance until their deadline.
    stranded = {m for m, n in backlog.items() if n > 0 and m not in held | set(placements)}
    demands = {m: demands.get(m, clock.now_ms()) for m in set(demands) | stranded}
    busy = {
        m
        for held in resident.values()
        for m, res in held.items()
        if every_resident or res.in_flight > 0 or backlog.get(m, 0) > 0
    }
    asked = sorted(set(demands) | set(placements))
    index, measured, errors = await _models(r, sorted(busy | set(asked)), sorted(demands))
    ready = _ready(await readiness.ready_versions(r, asked))
    return Fleet(
        now_ms=clock.now_ms(),
        demands=demands,
        placements=placements,
        index=index,
        measured=measured,
        workers=workers,
        resident=resident,
        load_errors=errors,
        ready=ready,
        backlog=backlog,
        acks=await read_acks(r, placements),
        unloading=frozenset(unloading),
    )
