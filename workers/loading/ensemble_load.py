"""Ensembles at a worker's start-up: validated against the repository, then published.

An ensemble has no instance to load: every scheduler runs it (``scheduler.ensemble.runner``).
What loading means for it is the check Triton makes at load
(``shared.model_config.ensemble_graph.validate``: unknown composing model, a tensor produced twice,
an input never produced, a cycle... each refused with one line, recorded as the model's load error)
and making its config and versions known to the gateways and schedulers. Every worker that scans the
repository does it; the writes are idempotent.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import redis.asyncio as aioredis

from shared.fleet import change_feed, expected_models, model_registry
from shared.model_config import ModelConfig
from shared.model_config.ensemble_graph import is_ensemble, validate
from shared.storage.repository import RepositoryModel, ScanResult
from shared.wire import keys
from shared.wire.errors import ConchError

log = logging.getLogger(__name__)


async def publish_ensembles(
    r: aioredis.Redis, scan: ScanResult, worker_id: str, wanted: set[str]
) -> list[str]:
    """Validate and publish the scan's ensembles; returns the names published."""
    configs = {name: model.config for name, model in scan.models.items()}
    published: list[str] = []
    for name, model in scan.models.items():
        if not is_ensemble(model.config) or (wanted and name not in wanted):
            continue
        if await publish_one(r, model, configs, worker_id) is None:
            published.append(name)
    return published


async def publish_one(
    r: aioredis.Redis,
    model: RepositoryModel,
    configs: Mapping[str, ModelConfig | None],
    worker_id: str,
) -> str | None:
    """Validate one ensemble against the repository's configs and publish it; the one-line
    refusal (also recorded as its load error) when it is not loadable."""
    name = model.name
    try:
        validate(model.config, configs)
    except ConchError as exc:
        log.error("ensemble not loadable", extra={"model": name, "error": exc.message})
        await expected_models.record_load_error(r, name, worker_id, exc.message)
        return exc.message
    if not model.versions:
        message = f"no version to load (on disk: {model.available_versions})"
        await expected_models.record_load_error(r, name, worker_id, message)
        return message
    await model_registry.publish_model(r, model.config)
    await r.sadd(keys.model_versions(name), *model.versions)
    await expected_models.clear_load_errors(r, [name])
    log.info("ensemble published", extra={"model": name, "versions": model.versions})
    return None


async def unpublish(r: aioredis.Redis, name: str, versions: list[int]) -> None:
    """The versions leave the ensemble's version set, and the change is announced: every
    scheduler re-reads at once, leaves their readiness set and retires their runners."""
    if versions:
        await r.srem(keys.model_versions(name), *versions)
        await change_feed.announce(r, change_feed.MODELS)  # the schedulers re-read at once
