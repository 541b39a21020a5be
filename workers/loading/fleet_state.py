"""At start-up, the fleet's desired state applied to what the disk says (explicit and on_demand).

A worker started after models were loaded or unloaded through the repository API loads what the
fleet serves, not what its disk holds: a model unloaded everywhere stays unloaded, versions
unloaded one by one stay out, and a config override replaces config.pbtxt. In explicit model
control mode it loads only the models ``workers.loading.start_set`` selects (LOAD_MODELS and what
the API loaded); the others are in the index, marked not loaded. In the other modes (none, poll)
the API's load and unload are refused, so there is no desired state to apply: every model loads.
On_demand mode starts as explicit does (its start set: LOAD_MODELS, pinned, and what the API
loaded); the placer loads the others where and when they are asked for.
The worker also publishes what it found on disk (the repository index,
``workers.loading.repository_index``), errors included, before it loads anything: the gateways
then know every model the mesh will serve.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path

import redis.asyncio as aioredis

from shared import model_config
from shared.fleet import control, expected_models
from shared.storage import repository
from shared.storage.repository import RepositoryModel, ScanResult
from shared.wire.errors import ConchError
from workers.loading.control_actions import write_files
from workers.loading.repository_index import index_of
from workers.loading.start_set import ALL, missing, start_set

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class _Pinned(RepositoryModel):
    """A repository model whose versions to load are fixed (the policy minus unloaded ones)."""

    pinned: tuple[int, ...] = ()

    @property
    def versions(self) -> list[int]:
        return list(self.pinned)


async def apply_fleet_state(
    redis: aioredis.Redis,
    scan: ScanResult,
    root: Path | None = None,
    mode: str = control.MODE_EXPLICIT,
    load_models: Sequence[str] = (ALL,),
    config_name: str = "",
) -> ScanResult:
    """The scan with the fleet's desired state applied (explicit mode); the repository index is
    published. A model that exists only through files a load sent (not on this worker's disk)
    is written into ``root`` first."""
    if mode not in control.API_MODES:  # none, poll: no desired state, every model loads
        await expected_models.write_index(redis, index_of(scan))
        return scan
    states = await control.read_states(redis)
    scan = await _add_uploaded(redis, scan, states, root, config_name)
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
    chosen = start_set({n: m.config for n, m in scan.models.items()}, load_models, states)
    errors = dict(scan.errors)
    for name in missing(load_models, [*scan.models, *scan.errors]):
        errors[name] = (
            f"failed to load '{name}': no model directory '{name}' in the model repositories "
            "(CONCH_WORKER_LOAD_MODELS, Triton's --load-model)"
        )
    scan = ScanResult(models=scan.models, errors=errors)
    await expected_models.write_index(redis, index_of(scan, set(scan.models) - chosen))
    return ScanResult(models={n: m for n, m in models.items() if n in chosen}, errors=errors)


async def _add_uploaded(
    redis: aioredis.Redis,
    scan: ScanResult,
    states: dict[str, control.DesiredState],
    root: Path | None,
    config_name: str,
) -> ScanResult:
    absent = [
        name
        for name, state in states.items()
        if state.files and not state.unloaded and name not in scan.models
    ]
    if root is None or not absent:
        return scan
    models, errors = dict(scan.models), dict(scan.errors)
    for name in absent:
        try:
            await write_files(redis, name, root / name)
            models[name] = repository.read_model(root / name, config_name=config_name)
        except ConchError as exc:
            errors[name] = exc.message
    return ScanResult(models=models, errors=errors)
