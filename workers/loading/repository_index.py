"""The repository index a worker publishes: every model directory on disk, whatever its backend.

Its entries decide what the mesh is expected to serve (``shared.fleet.expected_models``): a model
directory that cannot be read, or whose backend no Conch worker serves, is listed with the reason
and not expected; every other one is expected until it is ready, fails to load, or is unloaded.
"""

from __future__ import annotations

import logging

import redis.asyncio as aioredis

from shared.fleet import expected_models
from shared.fleet.control import IndexEntry
from shared.model_config.ensemble_graph import ENSEMBLE_PLATFORM
from shared.storage import repository
from shared.storage.repository import RepositoryModel, ScanResult
from shared.wire import keys
from workers.backend_table import BACKENDS

log = logging.getLogger(__name__)


def entry_for(model: RepositoryModel) -> IndexEntry:
    backend = model.config.backend
    if backend not in BACKENDS and backend != ENSEMBLE_PLATFORM:  # ensembles: the schedulers
        return IndexEntry(
            versions=model.available_versions,
            error=f"no Conch worker serves backend '{backend or model.config.platform}' "
            f"(served: {', '.join(sorted(BACKENDS))})",
        )
    return IndexEntry(versions=model.available_versions)


def index_of(scan: ScanResult) -> dict[str, IndexEntry]:
    index = {name: IndexEntry(error=error) for name, error in scan.errors.items()}
    index.update({name: entry_for(model) for name, model in scan.models.items()})
    return index


async def restore_if_lost(redis: aioredis.Redis, model_repository: str) -> bool:
    """Publish the index again after Redis lost it (a restart without persistence); True if so."""
    if await redis.exists(keys.repository_scanned()):
        return False
    scan = repository.scan(model_repository)
    await expected_models.write_index(redis, index_of(scan))
    log.warning("redis had lost the repository index; published it again")
    return True
