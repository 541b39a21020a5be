"""Control messages in on_demand mode: the placer's targeted loads and unloads, and the
repository API's (untargeted) ones, which pin what they load.

A targeted LOAD (the placer chose this worker) makes room first: the model's size is estimated
(its last measured load, ``on_demand.read_measured``, else its files' size), and
``eviction.choose`` picks least recently used idle, unpinned models to unload until it fits the
worker's budget. When even every evictable model gone would not make room, nothing is unloaded
and the answer is an error starting "no room", so the placer tries another worker. Victims are
unloaded through the drained path (``VersionHost.stop``: no queued request is lost), then the
model loads through the explicit-mode path (a fresh read of its directory) inside a
:class:`~workers.loading.model_memory.MemoryMeter`; the measured bytes become the model's
charge here and the placer's estimate next time. Messages are handled one at a time
(``ModelControl.run``), so one load is measured at a time.

A targeted UNLOAD is the placer dropping an idle copy; a pinned model is never dropped.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from shared.fleet import control, on_demand
from shared.fleet.control import ControlAck, ControlMessage
from shared.metrics.on_demand import MODEL_LOADS, MODEL_UNLOADS
from shared.placement import eviction
from workers.loading import control_actions
from workers.loading.control_actions import ModelHost, ack
from workers.loading.model_memory import MemoryMeter, files_bytes
from workers.loading.resident import Residents, names

log = logging.getLogger(__name__)

NO_ROOM = "no room"


async def handle(host: ModelHost, residents: Residents, message: ControlMessage) -> ControlAck:
    """A LOAD or UNLOAD in on_demand mode, meant for this worker (or for every one)."""
    targeted = bool(message.target)
    if message.action == control.LOAD:
        if targeted:
            return await place(host, residents, message)
        return await measured_load(host, residents, message, on_demand.LOAD_PINNED, pinned=True)
    if message.action == control.UNLOAD:
        if targeted and message.model in residents.pinned:
            return ack(
                host,
                control.ACK_ERROR,
                f"model '{message.model}' is pinned on worker {host.id} (loaded at start or "
                "through the repository API): only the repository API unloads it",
            )
        reason = (message.reason or on_demand.UNLOAD_IDLE) if targeted else on_demand.UNLOAD_API
        return await unload(host, residents, message, reason)
    return ack(host, control.ACK_ERROR, f"unknown control action '{message.action}'")


def loaded_versions(host: ModelHost, model: str) -> list[int]:
    return sorted(v for (m, v) in host.loaded if m == model)


async def place(host: ModelHost, residents: Residents, message: ControlMessage) -> ControlAck:
    """The placer's load: evict what must go, load, measure."""
    name = message.model
    already = loaded_versions(host, name)
    if already:
        return ack(host, control.ACK_OK, "already loaded on this worker", loaded=already)
    need = await estimate(host, name)
    resident = residents.eviction_view(host.loaded)
    victims = eviction.choose(resident, need, residents.budget_bytes)
    if victims is None:
        return ack(host, control.ACK_ERROR, no_room(host.id, name, need, residents, resident))
    if victims:
        log.info(
            "evicting to make room",
            extra={"model": name, "need": need, "victims": [v.model for v in victims]},
        )
        evicted = await asyncio.gather(
            *(
                unload(
                    host,
                    residents,
                    control.new_message(control.UNLOAD, v.model),
                    on_demand.UNLOAD_EVICTED,
                )
                for v in victims
            )
        )
        failed = [
            (v, a) for v, a in zip(victims, evicted, strict=True) if a.status != control.ACK_OK
        ]
        if failed:
            detail = "; ".join(f"'{v.model}': {a.message}" for v, a in failed)
            return ack(
                host,
                control.ACK_ERROR,
                f"{NO_ROOM} on worker {host.id} for model '{name}': could not evict {detail}",
            )
    reason = message.reason or on_demand.LOAD_DEMAND
    return await measured_load(host, residents, message, reason, pinned=False)


async def estimate(host: ModelHost, model: str) -> int:
    """The bytes a model's load is expected to take: its last measured load anywhere in the
    fleet, else its files' size on disk."""
    try:
        measured = (await on_demand.read_measured(host.redis)).get(model)
    except Exception:
        log.exception("measured model sizes unreadable; estimating from the files")
        measured = None
    if measured:
        return measured
    return await asyncio.to_thread(files_bytes, _dirs(host, model))


def _dirs(host: ModelHost, model: str) -> list[Path]:
    return host.repositories.dirs_of(model)


def no_room(
    worker: str, model: str, need: int, residents: Residents, resident: list[eviction.Resident]
) -> str:
    held = [r for r in resident if not r.evictable]
    pinned = [r for r in held if r.pinned]
    busy = [r for r in held if not r.pinned]
    parts = [f"pinned {names(pinned)}"] if pinned else []
    if busy:
        parts.append(f"busy (executing or holding sequences) {names(busy)}")
    whom = "; ".join(parts) if parts else "no model (the model is larger than the budget)"
    return (
        f"{NO_ROOM} on worker {worker} for model '{model}': needs {need} bytes, budget "
        f"{residents.budget_bytes} bytes, {eviction.used_bytes(held)} bytes held by {whom}"
    )


async def measured_load(
    host: ModelHost, residents: Residents, message: ControlMessage, reason: str, pinned: bool
) -> ControlAck:
    """Load through the explicit-mode path, measuring what the load takes."""
    name = message.model
    meter = MemoryMeter(_dirs(host, name), gpu_device=residents.gpu_device)
    await asyncio.to_thread(meter.__enter__)
    answer = await control_actions.load(host, message, not_loaded=not pinned)
    if answer.status != control.ACK_OK or not loaded_versions(host, name):
        return answer
    await asyncio.to_thread(meter.__exit__, None, None, None)
    if meter.result is None:  # pragma: no cover - set whenever the block ended without error
        return answer
    size = meter.result.bytes
    residents.loaded(name, size, pinned=pinned or name in residents.pinned)
    if answer.loaded:
        MODEL_LOADS.labels(name, reason).inc()
    try:
        await on_demand.record_measured(host.redis, name, size)
    except Exception:
        log.exception("measured size not recorded", extra={"model": name})
    log.info("model measured", extra={"model": name, "bytes": size, "reason": reason})
    return answer


async def unload(
    host: ModelHost, residents: Residents, message: ControlMessage, reason: str
) -> ControlAck:
    """Unload (drained) and count it; the model leaves the resident set once no version of it
    is left here."""
    answer = await control_actions.unload(host, message)
    if answer.status == control.ACK_OK and answer.unloaded:
        MODEL_UNLOADS.labels(message.model, reason).inc()
    if not loaded_versions(host, message.model):
        residents.forget(message.model)
    return answer
