"""At start-up, the fleet's desired state applied to what the disk says.

A worker started after models were loaded or unloaded through the repository API loads what the
fleet serves, not what its disk holds: a model unloaded everywhere stays unloaded, versions
unloaded one by one stay out, and a config override replaces config.pbtxt. The worker also
publishes what it found on disk (the repository index, ``workers.loading.repository_index``), errors
included, before it loads anything: the gateways then know every model the mesh will serve.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import redis.asyncio as aioredis

from shared import model_config
from shared.fleet import control, expected_models
from shared.storage import repository
from shared.storage.repository import RepositoryModel, ScanResult
from shared.wire.errors import ConchError
from workers.loading.control_actions import write_files
from workers.loading.repository_index import index_of

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class _Pinned(RepositoryModel):
    """A repository model whose versions to load are fixed (the policy minus unloaded ones)."""

    pinned: tuple[int, ...] = ()

    @property
    def versions(self) -> list[int]:
        return list(self.pinned)


async def apply_fleet_state(
    redis: aioredis.Redis, scan: ScanResult, root: Path | None = None
) -> ScanResult:
    """The scan with the fleet's desired state applied; the repository index is published.
    A model that exists only through files a load sent (not on this worker's disk) is written
    into ``root`` first."""
    states = await control.read_states(redis)
    scan = await _add_uploaded(redis, scan, states, root)
    models: dict[str, RepositoryModel] = {}
    for name, model in scan.models.items():
        state = states.get(name)
        if state is None:
            models[name] = model
            continue
        if state.unloaded:
            log.info(
                "model left unloaded (unloaded through the repository API)",
                extra={"model": name},
            )
            continue
        if state.files:
            try:
                await write_files(redis, name, model.path)
            except ConchError as exc:
                log.error(
                    "model files of the last load not written",
                    extra={"model": name, "error": exc.message},
                )
        if state.config is not None:
            try:
                config = model_config.from_json(
                    state.config, source=f"override of {name!r}", model_dir=model.path
                )
                model = repository.read_model(model.path, config)
            except ConchError as exc:
                log.error(
                    "config override unusable; using config.pbtxt",
                    extra={"model": name, "error": exc.message},
                )
        if state.excluded:
            pinned = tuple(v for v in model.versions if v not in state.excluded)
            model = _Pinned(
                **{f.name: getattr(model, f.name) for f in dataclasses.fields(RepositoryModel)},
                pinned=pinned,
            )
        models[name] = model
    await expected_models.write_index(redis, index_of(scan))
    return ScanResult(models=models, errors=scan.errors)


async def _add_uploaded(
    redis: aioredis.Redis,
    scan: ScanResult,
    states: dict[str, control.DesiredState],
    root: Path | None,
) -> ScanResult:
    missing = [
        name
        for name, state in states.items()
        if state.files and not state.unloaded and name not in scan.models
    ]
    if root is None or not missing:
        return scan
    models, errors = dict(scan.models), dict(scan.errors)
    for name in missing:
        try:
            await write_files(redis, name, root / name)
            models[name] = repository.read_model(root / name)
        except ConchError as exc:
            errors[name] = exc.message
    return ScanResult(models=models, errors=errors)
