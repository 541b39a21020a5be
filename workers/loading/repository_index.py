"""The repository index a worker publishes: every model directory on disk, whatever its backend.

Its entries decide what the mesh is expected to serve (``shared.fleet.expected_models``): a model
directory that cannot be read, or whose backend no Conch worker serves, is listed with the reason
and not expected; every other one is expected until it is ready, fails to load, or is unloaded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection

import redis.asyncio as aioredis

from shared.fleet import control, expected_models
from shared.fleet.control import IndexEntry
from shared.model_config import python_based
from shared.model_config.defaults import PLATFORM_BACKENDS
from shared.model_config.ensemble_graph import ENSEMBLE_PLATFORM
from shared.storage.repositories import Repositories
from shared.storage.repository import RepositoryModel, ScanResult
from shared.wire import keys
from workers.backend_table import BACKENDS
from workers.loading.model_memory import files_bytes
from workers.loading.start_set import start_set
from workers.settings import WorkerSettings

log = logging.getLogger(__name__)


def entry_for(model: RepositoryModel, not_loaded: bool = False) -> IndexEntry:
    """Any backend that is not built in is a Python-based backend's: the python worker loads
    the model, or records Triton's load error naming where it looked for the backend.
    ``not_loaded``: loaded at start only if asked for (explicit mode), or loaded by a placement
    that may end (on_demand mode): not a model the mesh waits for to be ready.

    The entry names the backend and the files' size on disk: the on_demand placer places a
    model never loaded yet by them (a worker of that backend, with room for about that much)."""
    config = model.config
    backend = config.backend or PLATFORM_BACKENDS.get(config.platform, "")
    served = backend in BACKENDS or python_based.is_candidate(config, BACKENDS)
    size = files_bytes([model.path])
    if not served and backend != ENSEMBLE_PLATFORM:  # ensembles: the schedulers
        return IndexEntry(
            versions=model.available_versions,
            error=f"no Conch worker serves backend '{backend or config.platform}' "
            f"(served: {', '.join(sorted(BACKENDS))})",
            backend=backend,
            files_bytes=size,
        )
    return IndexEntry(
        versions=model.available_versions,
        not_loaded=not_loaded,
        backend=backend,
        files_bytes=size,
    )


def index_of(scan: ScanResult, not_loaded: Collection[str] = ()) -> dict[str, IndexEntry]:
    """The index of a scan; ``not_loaded``: models explicit or on_demand mode did not load at
    start."""
    index = {name: IndexEntry(error=error) for name, error in scan.errors.items()}
    for name, model in scan.models.items():
        index[name] = entry_for(model, name in not_loaded)
    return index


async def restore_if_lost(
    redis: aioredis.Redis, repositories: Repositories, settings: WorkerSettings
) -> bool:
    """Publish the index again after Redis lost it (a restart without persistence); True if so."""
    if await redis.exists(keys.repository_scanned()):
        return False
    scan = await asyncio.to_thread(repositories.scan, not settings.strict_model_config)
    not_loaded: set[str] = set()
    if settings.model_control_mode in control.API_MODES:
        configs = {name: model.config for name, model in scan.models.items()}
        states = await control.read_states(redis)
        not_loaded = set(configs) - start_set(configs, settings.load_models, states)
    await expected_models.write_index(redis, index_of(scan, not_loaded))
    log.warning("redis had lost the repository index; published it again")
    return True
