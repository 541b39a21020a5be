"""Loading and unloading one version of a model: its instances by group, each warmed up."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shared.runtime import clock
from shared.storage.repository import RepositoryModel
from shared.wire.errors import ConchError, ErrorCode
from workers.backend import Backend, LoadSpec, ModelInstance
from workers.loading.placement import Devices, placements
from workers.loading.warmup import warmup_batches
from workers.sequence.support import check_sequence_support

log = logging.getLogger(__name__)


class VersionLoadError(Exception):
    """One version of an all-or-nothing load failed; the versions loaded before it are unloaded."""

    def __init__(self, version: int, reason: str):
        super().__init__(f"version {version} failed to load: {reason}")
        self.version = version


@dataclass
class LoadedVersion:
    model: RepositoryModel
    version: int
    instances: list[ModelInstance] = field(default_factory=list)
    load_seconds: float = 0.0
    # Set when a reload replaced this copy: its serving loops stop after their current batch.
    retired: bool = False
    # Executions running now and when the last one ended (0: none yet): what on_demand eviction
    # reads (``workers.loading.resident``) to spare busy models and pick the least recently used.
    in_flight: int = 0
    last_used_ms: int = 0
    _count_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def name(self) -> str:
        return self.model.name

    def executing(self, gauge: Any = None) -> Callable[[], None]:
        """An execution starts: ``gauge`` (its in-flight gauge) and ``in_flight`` go up; the
        callback returned ends it (on the pool's thread, hence the lock: several instances of
        the version end executions at once) and stamps ``last_used_ms``."""
        if gauge is not None:
            gauge.inc()
        with self._count_lock:
            self.in_flight += 1

        def done() -> None:
            if gauge is not None:
                gauge.dec()
            with self._count_lock:
                self.in_flight -= 1
                self.last_used_ms = clock.now_ms()

        return done


def load_version(
    backend: Backend, model: RepositoryModel, version: int, devices: Devices | None = None
) -> LoadedVersion:
    """Load every instance of one version on this worker's devices (``workers.loading.placement``)
    and run its warmup (before it may be READY)."""
    started = time.monotonic()
    loaded = LoadedVersion(model, version)
    config = model.config
    devices = devices or Devices()
    check_sequence_support(config, model.path)
    backend.check_decoupled(config)
    try:
        for placement in placements(config, devices, devices.visible()):
            spec = LoadSpec(
                config=config,
                version=version,
                version_path=model.version_path(version),
                model_path=model.path,
                instance_group=placement.group,
                instance_index=placement.index,
                device=placement.device,
                device_id=placement.device_id,
            )
            instance = backend.load(spec)
            loaded.instances.append(instance)
            _warm_up(instance, spec)
    except Exception:
        for instance in loaded.instances:
            try:
                instance.unload()
            except Exception:
                log.exception("unload after a failed load failed")
        raise
    loaded.load_seconds = time.monotonic() - started
    return loaded


def _warm_up(instance: ModelInstance, spec: LoadSpec) -> None:
    """Triton's model_warmup on a freshly loaded instance; a failed request fails the load."""
    for batch in warmup_batches(spec.config, spec.version_path):
        execution = instance.execute(batch)
        failed = [r.error for r in execution.results if r.error is not None]
        if failed:
            raise ConchError(
                ErrorCode.INTERNAL,
                f"warmup of model '{spec.config.name}' version {spec.version} failed: "
                f"{failed[0].message}",
            )


def unload_instances(loaded: LoadedVersion) -> None:
    """Unload every instance of the version; one that fails is logged and the rest still go."""
    for instance in loaded.instances:
        try:
            instance.unload()
        except Exception:
            log.exception("unload failed", extra={"model": loaded.name})
