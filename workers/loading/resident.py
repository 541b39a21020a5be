"""What this worker holds in on_demand mode, per model: size, use, pins, and its budget.

The placer (``scheduler.placement``) decides where a model goes from each worker's published
resident set (``shared.fleet.on_demand.Resident``, replaced with every heartbeat); the worker
decides what to evict from the same figures (``shared.placement.eviction``). One source for
both, so that the placer's view of a worker's free room is the worker's own.

Per model (every loaded version together): the bytes its load was measured to take
(``workers.loading.model_memory``; a model loaded at start-up is charged its files' size, its
load not being measured), when it was loaded and last executed a batch (``LoadedVersion``
stamps each execution's end), the executions running now, the sequences its instances hold
(``workers.sequence.occupancy``), one copy's capacity, and whether it is pinned (loaded at
start or through the repository API: never evicted, never dropped by the placer).

The heartbeat thread reads this while the event loop changes it: readers copy before iterating
and a failed snapshot only skips one publication.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from shared.fleet import control, on_demand
from shared.fleet.on_demand import Resident
from shared.metrics.on_demand import BUDGET_BYTES, RESIDENT_BYTES, RESIDENT_MODELS
from shared.placement import budget, eviction
from shared.runtime import clock
from workers.loading.loader import LoadedVersion
from workers.loading.model_memory import files_bytes, gpu_total_bytes
from workers.sequence import occupancy
from workers.settings import WorkerSettings

log = logging.getLogger(__name__)

VersionKey = tuple[str, int]
# An unset budget in on_demand mode: half of the memory the models live in.
DEFAULT_BUDGET = "0.5"


def gpu_device(settings: WorkerSettings) -> int | None:
    """The CUDA index whose memory the budget is of: a worker pinned to GPUs (``gpu_ids``)
    holds its models there; None: a CPU worker, whose budget is of the machine's memory."""
    return 0 if settings.gpu_ids else None


def budget_bytes(settings: WorkerSettings) -> int:
    """The worker's model memory budget in bytes; 0 outside on_demand mode without a budget."""
    text = settings.model_memory_budget.strip()
    if not text:
        if settings.model_control_mode != control.MODE_ON_DEMAND:
            return 0
        text = DEFAULT_BUDGET
    device = gpu_device(settings)
    total = gpu_total_bytes(device) if device is not None else None
    return budget.resolve_budget(text, total)


class Residents:
    """The on_demand bookkeeping of one worker's loaded models (not the models themselves:
    ``VersionHost.loaded`` holds those, and is passed in wherever they are read)."""

    def __init__(self, budget: int = 0, on_demand: bool = False, gpu: int | None = None):
        self.budget_bytes = budget
        self.on_demand = on_demand
        self.gpu_device = gpu
        self.pinned: set[str] = set()
        self._bytes: dict[str, int] = {}
        self._loaded_ms: dict[str, int] = {}

    @classmethod
    def of(cls, settings: WorkerSettings) -> Residents:
        on = settings.model_control_mode == control.MODE_ON_DEMAND
        return cls(budget_bytes(settings), on, gpu_device(settings))

    def loaded(self, model: str, size: int, pinned: bool) -> None:
        """A model was loaded (or loaded again) here, taking ``size`` bytes."""
        self._bytes[model] = size
        self._loaded_ms[model] = clock.now_ms()
        if pinned:
            self.pinned.add(model)

    def pin_loaded(self, loaded: Mapping[VersionKey, LoadedVersion]) -> list[str]:
        """The models loaded at start-up: pinned, charged their files' size (their loads were
        not measured one by one). Returns their names."""
        names: list[str] = []
        for name, lv in _by_model(loaded).items():
            if name not in self._bytes:
                self.loaded(name, files_bytes([lv[0].model.path]), pinned=True)
                names.append(name)
        return names

    def forget(self, model: str) -> None:
        """No version of the model is loaded here any more."""
        self._bytes.pop(model, None)
        self._loaded_ms.pop(model, None)
        self.pinned.discard(model)

    def snapshot(self, loaded: Mapping[VersionKey, LoadedVersion]) -> dict[str, Resident]:
        """Per model held: its :class:`Resident` as the placer reads it."""
        found: dict[str, Resident] = {}
        for name, versions in _by_model(loaded).items():
            loaded_ms = self._loaded_ms.get(name, 0)
            found[name] = Resident(
                bytes=self._bytes.get(name, 0),
                last_used_ms=max([loaded_ms, *(lv.last_used_ms for lv in versions)]),
                pinned=name in self.pinned,
                in_flight=sum(lv.in_flight for lv in versions),
                live_sequences=sum(occupancy.held(name, lv.version) for lv in versions),
                capacity=max(_capacity(lv) for lv in versions),
            )
        return found

    def eviction_view(self, loaded: Mapping[VersionKey, LoadedVersion]) -> list[eviction.Resident]:
        """The resident set as ``eviction.choose`` takes it."""
        return [
            eviction.Resident(
                model=name,
                bytes=r.bytes,
                last_used_ms=r.last_used_ms,
                pinned=r.pinned,
                in_flight=r.in_flight,
                live_sequences=r.live_sequences,
            )
            for name, r in self.snapshot(loaded).items()
        ]

    def queue(
        self, pipe: Any, worker: str, loaded: Mapping[VersionKey, LoadedVersion], ttl_ms: int
    ) -> None:
        """Publish the resident set on the heartbeat pipeline (heartbeat thread), in on_demand
        mode; a snapshot that fails (a dict changed under it) skips this beat's."""
        if not self.on_demand:
            return
        try:
            resident = self.snapshot(loaded)
        except Exception:
            log.exception("resident set not published this beat")
            return
        on_demand.queue_resident(pipe, worker, resident, ttl_ms)

    def export(self, backend: str, loaded: Mapping[VersionKey, LoadedVersion]) -> None:
        """The scrape hook: resident models, their bytes and the budget of this worker."""
        resident = self.snapshot(loaded)
        RESIDENT_MODELS.labels(backend).set(len(resident))
        RESIDENT_BYTES.labels(backend).set(sum(r.bytes for r in resident.values()))
        BUDGET_BYTES.labels(backend).set(self.budget_bytes)


def _by_model(loaded: Mapping[VersionKey, LoadedVersion]) -> dict[str, list[LoadedVersion]]:
    grouped: dict[str, list[LoadedVersion]] = {}
    for (name, _), lv in list(loaded.items()):
        grouped.setdefault(name, []).append(lv)
    return grouped


def _capacity(lv: LoadedVersion) -> int:
    """Requests one copy of the version executes at once."""
    return max(len(lv.instances), 1) * max(lv.model.config.max_batch_size, 1)


def names(items: Iterable[eviction.Resident]) -> str:
    return ", ".join(f"'{r.model}' ({r.bytes} bytes)" for r in items)
