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
from shared.model_config.ensemble_graph import ENSEMBLE_PLATFORM
from shared.storage.repositories import Repositories
from shared.storage.repository import RepositoryModel, ScanResult
from shared.wire import keys
from workers.backend_table import BACKENDS
from workers.loading.start_set import start_set
from workers.settings import WorkerSettings

log = logging.getLogger(__name__)


def entry_for(model: RepositoryModel) -> IndexEntry:
    """Any backend that is not built in is a Python-based backend's: the python worker loads
    the model, or records Triton's load error naming where it looked for the backend."""
    backend = model.config.backend
    served = backend in BACKENDS or python_based.is_candidate(model.config, BACKENDS)
    if not served and backend != ENSEMBLE_PLATFORM:  # ensembles: the schedulers
        return IndexEntry(
            versions=model.available_versions,
            error=f"no Conch worker serves backend '{backend or model.config.platform}' "
            f"(served: {', '.join(sorted(BACKENDS))})",
        )
    return IndexEntry(versions=model.available_versions)


def index_of(scan: ScanResult, not_loaded: Collection[str] = ()) -> dict[str, IndexEntry]:
    """The index of a scan; ``not_loaded``: models explicit mode did not load at start."""
    index = {name: IndexEntry(error=error) for name, error in scan.errors.items()}
    for name, model in scan.models.items():
        entry = entry_for(model)
        if name in not_loaded and not entry.error:
            entry = IndexEntry(versions=entry.versions, not_loaded=True)
        index[name] = entry
    return index


async def restore_if_lost(
    redis: aioredis.Redis, repositories: Repositories, settings: WorkerSettings
) -> bool:
    """Publish the index again after Redis lost it (a restart without persistence); True if so."""
    if await redis.exists(keys.repository_scanned()):
        return False
    scan = await asyncio.to_thread(repositories.scan, not settings.strict_model_config)
    not_loaded: set[str] = set()
    if settings.model_control_mode == control.MODE_EXPLICIT:
        configs = {name: model.config for name, model in scan.models.items()}
        states = await control.read_states(redis)
        not_loaded = set(configs) - start_set(configs, settings.load_models, states)
    await expected_models.write_index(redis, index_of(scan, not_loaded))
    log.warning("redis had lost the repository index; published it again")
    return True
