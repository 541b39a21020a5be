"""Loading and unloading one version of a model: its instances by group, each warmed up."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from shared import gpu
from shared.errors import ConchError, ErrorCode
from shared.repository import RepositoryModel
from workers.backend import Backend, LoadSpec, ModelInstance
from workers.sequence.support import check_sequence_support
from workers.warmup import warmup_batches

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

    @property
    def name(self) -> str:
        return self.model.name


def device_for(kind: str, gpus: list[int], index: int) -> tuple[str, int]:
    """Triton's instance kinds: KIND_GPU needs a GPU, KIND_AUTO uses one where present."""
    count = gpu.gpu_count()
    if kind == "KIND_CPU" or kind == "KIND_MODEL":
        return "cpu", 0
    if count == 0:
        if kind == "KIND_GPU":
            raise ConchError(
                ErrorCode.UNAVAILABLE, "instance group kind KIND_GPU needs a GPU; none is visible"
            )
        return "cpu", 0
    if gpus:
        return "gpu", gpus[index % len(gpus)]
    return "gpu", index % count


def load_version(backend: Backend, model: RepositoryModel, version: int) -> LoadedVersion:
    """Load every instance of one version and run its warmup (before it may be READY)."""
    started = time.monotonic()
    loaded = LoadedVersion(model, version)
    config = model.config
    check_sequence_support(config, model.path)
    try:
        for group in config.instance_groups:
            for index in range(group.count):
                device, device_id = device_for(group.kind, group.gpus, index)
                spec = LoadSpec(
                    config=config,
                    version=version,
                    version_path=model.version_path(version),
                    model_path=model.path,
                    instance_group=group,
                    instance_index=index,
                    device=device,
                    device_id=device_id,
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
