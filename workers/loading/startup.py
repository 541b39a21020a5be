"""Loading at start-up: every version the repository and the fleet's desired state select.

A model or version that fails to load is logged and left out; the others still load, as in
Triton. A model none of whose versions loaded is recorded as failed
(``shared.fleet.expected_models``): the mesh no longer waits for it, and ``conch up`` stops with its
error. Each model's config is published and its batch streams' consumer group made once its versions
are loaded. Nothing is served yet: the service starts the serving tasks once the executor is sized
for the loaded instances.
"""

from __future__ import annotations

import asyncio
import logging

from shared.fleet import expected_models, labels, model_registry, streams
from shared.storage.repository import ScanResult
from shared.wire import keys
from shared.wire.errors import ConchError
from workers.loading import auto_complete
from workers.loading.ensemble_load import publish_ensembles
from workers.loading.loader import load_version
from workers.loading.placement import Devices, runs_here
from workers.loading.version_host import VersionHost

log = logging.getLogger(__name__)


async def load_at_startup(scan: ScanResult, host: VersionHost) -> None:
    """Load the scan's versions this worker serves into ``host`` (held, not served yet)."""
    backend, settings, redis = host.backend, host.settings, host.redis
    devices = Devices.of(settings)
    for name, error in scan.errors.items():
        log.error("model not loadable", extra={"model": name, "error": error})
    wanted = set(settings.models)
    for name, model in scan.models.items():
        if (wanted and name not in wanted) or not backend.accepts(model.config):
            continue
        if not runs_here(model.config, devices):
            log.info("no instance of the model on this worker's devices", extra={"model": name})
            continue
        try:
            model = await asyncio.to_thread(
                auto_complete.complete, backend, model, settings.strict_model_config
            )
        except ConchError as exc:
            log.error("model not loadable", extra={"model": name, "error": exc.message})
            await expected_models.record_load_error(redis, name, host.id, exc.message)
            continue
        if not model.versions:
            log.error(
                "model has no version to load",
                extra={"model": name, "on_disk": model.available_versions},
            )
            await expected_models.record_load_error(
                redis, name, host.id, f"no version to load (on disk: {model.available_versions})"
            )
            continue
        versions: list[int] = []
        first_error = ""
        for version in model.versions:
            log.info("loading model", extra={"model": name, "version": version})
            try:
                done = await asyncio.to_thread(load_version, backend, model, version, devices)
            except Exception as exc:
                message = exc.message if isinstance(exc, ConchError) else f"{exc}"
                first_error = first_error or f"version {version}: {message}"
                fields = {"model": name, "version": version, "error": message}
                if isinstance(exc, ConchError):
                    log.error("model load failed", extra=fields)
                else:
                    log.exception("model load failed", extra=fields)
                continue
            host.add(done)
            versions.append(version)
            log.info(
                "model loaded",
                extra={
                    "model": name,
                    "version": version,
                    "instances": len(done.instances),
                    "seconds": round(done.load_seconds, 3),
                },
            )
        if versions:
            await model_registry.publish_model(redis, model.config)
            await labels.publish(redis, model.path, model.config)
            await streams.ensure_groups(
                redis, [keys.batch_stream(name, v) for v in versions], keys.WORKER_GROUP
            )
            await expected_models.clear_load_errors(redis, [name])
        else:
            await expected_models.record_load_error(redis, name, host.id, first_error)
    await publish_ensembles(redis, scan, host.id, wanted)
