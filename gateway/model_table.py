"""The gateway's view of the fleet: model configs and which versions have live workers.

Re-read from Redis on a short interval (the configurations published in Redis are the truth;
this is a cache that keeps a Redis round trip off the request path). A stale view can only
cost a correct 503: the enqueue script checks liveness atomically in Redis.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import redis.asyncio as aioredis

from shared import keys, model_registry, periodic, readiness
from shared.errors import invalid, not_found
from shared.model_config import ModelConfig, TensorSpec

log = logging.getLogger(__name__)


class ModelTable:
    def __init__(self, r: aioredis.Redis, refresh_interval_s: float):
        self._redis = r
        self._interval = refresh_interval_s
        self._rev = -1
        self.configs: dict[str, ModelConfig] = {}
        # model -> version -> live instances (0: known but no live worker)
        self.versions: dict[str, dict[int, int]] = {}
        self.loaded = asyncio.Event()

    async def refresh(self) -> None:
        rev = int(await self._redis.get(keys.models_rev()) or 0)
        if rev != self._rev:
            self._rev, self.configs = await model_registry.read_models(self._redis)
        self.versions = await readiness.ready_versions(self._redis, list(self.configs))
        self.loaded.set()

    async def run(self) -> None:
        await periodic.every(self._interval, self.refresh, "model table")

    def config(self, model: str) -> ModelConfig:
        config = self.configs.get(model)
        if config is None:
            raise not_found(f"Request for unknown model: '{model}' is not found")
        return config

    def resolve_version(self, model: str, version: str | None) -> int:
        """An explicit version must exist; otherwise the newest version with a live worker."""
        self.config(model)
        known = self.versions.get(model, {})
        if version:
            try:
                number = int(version)
            except ValueError:  # Triton's text (clients match on it)
                raise invalid(
                    f"failed to get model version from specified version string '{version}'"
                ) from None
            if number not in known:
                raise not_found(
                    f"Request for unknown model: '{model}' version {number} is not found"
                )
            return number
        live = [v for v, instances in known.items() if instances > 0]
        if live:
            return max(live)
        if known:
            return max(known)
        raise not_found(f"Request for unknown model: '{model}' has no loaded version")

    def metadata(self, model: str, version: str | None) -> dict[str, Any]:
        """KServe v2 model metadata (REST and gRPC alike); -1 marks the batch dimension."""
        config = self.config(model)
        if version is not None:
            self.resolve_version(model, version)
        batch = [-1] if config.max_batch_size > 0 else []

        def tensors(specs: list[TensorSpec]) -> list[dict[str, Any]]:
            return [
                {"name": t.name, "datatype": t.datatype, "shape": batch + t.dims} for t in specs
            ]

        return {
            "name": model,
            "versions": [str(v) for v in sorted(self.versions.get(model, {}))],
            "platform": config.platform or config.backend,
            "inputs": tensors(config.inputs),
            "outputs": tensors(config.outputs),
        }

    def is_ready(self, model: str, version: str | None) -> bool:
        if model not in self.configs:
            return False
        known = self.versions.get(model, {})
        if version:
            return version.isdigit() and known.get(int(version), 0) > 0
        return any(instances > 0 for instances in known.values())
