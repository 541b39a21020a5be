"""Loading at start-up: every version the repository and the fleet's desired state select.

A model or version that fails to load is logged and left out; the others still load, as in
Triton. Each model's config is published and its batch streams' consumer group made once its
versions are loaded. Nothing is served yet: the service starts the serving tasks once the
executor is sized for the loaded instances.
"""

from __future__ import annotations

import asyncio
import logging

from shared import keys, labels, model_registry, streams
from shared.errors import ConchError
from shared.repository import ScanResult
from workers import auto_complete
from workers.loader import load_version
from workers.version_host import VersionHost

log = logging.getLogger(__name__)


async def load_at_startup(scan: ScanResult, host: VersionHost) -> None:
    """Load the scan's versions this worker serves into ``host`` (held, not served yet)."""
    backend, settings, redis = host.backend, host.settings, host.redis
    for name, error in scan.errors.items():
        log.error("model not loadable", extra={"model": name, "error": error})
    wanted = set(settings.models)
    for name, model in scan.models.items():
        if (wanted and name not in wanted) or not backend.accepts(model.config):
            continue
        try:
            model = await asyncio.to_thread(
                auto_complete.complete, backend, model, settings.strict_model_config
            )
        except ConchError as exc:
            log.error("model not loadable", extra={"model": name, "error": exc.message})
            continue
        if not model.versions:
            log.error(
                "model has no version to load",
                extra={"model": name, "on_disk": model.available_versions},
            )
            continue
        versions: list[int] = []
        for version in model.versions:
            log.info("loading model", extra={"model": name, "version": version})
            try:
                done = await asyncio.to_thread(load_version, backend, model, version)
            except ConchError as exc:
                log.error(
                    "model load failed",
                    extra={"model": name, "version": version, "error": exc.message},
                )
                continue
            except Exception as exc:
                log.exception(
                    "model load failed",
                    extra={"model": name, "version": version, "error": str(exc)},
                )
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
