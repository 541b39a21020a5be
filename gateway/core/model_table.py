"""The gateway's view of the fleet: model configs, which versions have live workers, and which
models the mesh is expected to serve (``shared.fleet.expected_models``).

Re-read from Redis when the change feed says the models changed (``shared.fleet.change_feed``: a
config published, a version newly ready or unmarked, the repository index or a load error
written), on every (re)subscription and on the feed's slow safety poll (the configurations
published in Redis are the truth; this is a cache that keeps a Redis round trip off the request
path). A worker that dies announces nothing: the table keeps each live worker's heartbeat expiry
and, once the earliest of them has passed, asks for a re-read (``stale``); readiness probes wait
for it (``current``), the request path does not. A stale view can only cost a correct 503: the
enqueue script checks liveness atomically in Redis. A model that is in
the repository but not loaded yet is answered "not at ready state" (503), as Triton answers a
loading model, never "unknown" (404).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from shared.fleet import expected_models, model_registry, readiness
from shared.fleet.expected_models import Expectations
from shared.model_config import ModelConfig, TensorSpec
from shared.runtime import clock
from shared.wire import keys
from shared.wire.errors import ConchError, invalid, not_found, unavailable

log = logging.getLogger(__name__)

INT64_MAX = 2**63 - 1


class ModelTable:
    def __init__(self, r: aioredis.Redis, on_stale: Callable[[], None] | None = None):
        self._redis = r
        self._on_stale = on_stale
        self._rev = -1
        self.configs: dict[str, ModelConfig] = {}
        # model -> version -> live instances (0: known but no live worker), as last read
        self._versions: dict[str, dict[int, int]] = {}
        # When the earliest heartbeat expiry counted in ``_versions`` passes (ms since epoch).
        self._stale_at: float = math.inf
        self._asked = False  # a re-read was asked for since the last one
        # What the mesh is expected to serve, and the subset of it expected but not ready here.
        self.expectations = Expectations()
        self.expected: set[str] = set()
        self.not_ready: list[str] = []
        self.loaded = asyncio.Event()
        self._listeners: list[Callable[[], None]] = []

    def on_refresh(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after every refresh (readiness follows the table)."""
        self._listeners.append(listener)

    async def refresh(self) -> None:
        rev = int(await self._redis.get(keys.models_rev()) or 0)
        if rev != self._rev:
            self._rev, self.configs = await model_registry.read_models(self._redis)
        self.expectations = await expected_models.read(self._redis)
        self.expected = expected_models.expected(self.expectations)
        self._versions, self._stale_at = await readiness.live_view(self._redis, list(self.configs))
        self._asked = False
        ready = {m for m, known in self.versions.items() if any(n > 0 for n in known.values())}
        self.not_ready = expected_models.not_ready(self.expected, ready)
        self.loaded.set()
        for listener in self._listeners:
            listener()

    async def refresh_models(self, names: set[str]) -> None:
        """Re-read only these models (a notice named them: a version newly ready or unmarked, a
        configuration published). The rest of the view stays; the full re-read on the feed's
        safety poll catches anything a lost notice hid."""
        if not self.loaded.is_set():
            return await self.refresh()  # nothing to update yet
        wanted = sorted(names)
        self.configs.update(await model_registry.read_configs(self._redis, wanted))
        known = [name for name in wanted if name in self.configs]
        versions, stale_at = await readiness.live_view(self._redis, known)
        self._versions.update(versions)
        self._stale_at = min(self._stale_at, stale_at)
        ready = {m for m, known in self._versions.items() if any(n > 0 for n in known.values())}
        self.not_ready = expected_models.not_ready(self.expected, ready)
        for listener in self._listeners:
            listener()

    @property
    def versions(self) -> dict[str, dict[int, int]]:
        """model -> version -> live instances, as last read. Once a worker counted here may have
        expired, a re-read is asked for (and this view kept until it lands: a late heartbeat is
        not a dead worker)."""
        if not self._asked and clock.now_ms() > self._stale_at:
            self._asked = True  # once per read from Redis
            if self._on_stale is not None:
                self._on_stale()
        return self._versions

    @property
    def stale(self) -> bool:
        return clock.now_ms() > self._stale_at

    async def current(self) -> None:
        """Re-read now if a worker counted in this view may have expired since (readiness
        probes: Triton's readiness judged on read, with no notice of a worker's death)."""
        if clock.now_ms() > self._stale_at:
            await self.refresh()

    def config(self, model: str) -> ModelConfig:
        config = self.configs.get(model)
        if config is None:
            raise self._missing(model, None)
        return config

    async def config_after_miss(self, model: str) -> ModelConfig:
        """The data plane's second look at a model this process's table lacks: the mesh may have
        learned of it since the last refresh (a worker wrote the index or published the config
        a moment ago). One Redis round trip, then the config, "not at ready state" (503) or
        "unknown" (404) as Redis has it now, never an unknown for a model that is loading."""
        found, published = await expected_models.read_one(self._redis, model)
        if published:
            await self.refresh()
            return self.config(model)
        raise self._missing(model, None, found, expected_models.expected(found))

    def _missing(
        self,
        model: str,
        version: int | None,
        found: Expectations | None = None,
        expected: set[str] | None = None,
    ) -> ConchError:
        """Why there is no ready ``model`` (``version``): loading (503) or unknown (404)."""
        found = self.expectations if found is None else found
        expected = self.expected if expected is None else expected
        served = self._served_versions(model, found) if model in expected else []
        if (
            model in expected
            and not served
            and model in self.configs
            and found.index[model].versions
        ):
            # Loaded with a policy that serves none of the versions on disk (or all of them
            # unloaded): nothing will become ready, as in Triton.
            return not_found(f"Request for unknown model: '{model}' has no available versions")
        if model in expected and (version is None or not served or version in served):
            if version is None and served:
                version = max(served)
            which = f"'{model}'" if version is None else f"'{model}' version {version}"
            return unavailable(f"Request for unknown model: {which} is not at ready state")
        failed = found.load_errors.get(model)
        if failed is not None:
            return not_found(
                f"Request for unknown model: '{model}' has no available versions "
                f"(failed to load: {failed.message})"
            )
        if version is not None:
            return not_found(f"Request for unknown model: '{model}' version {version} is not found")
        return not_found(f"Request for unknown model: '{model}' is not found")

    def _served_versions(self, model: str, found: Expectations) -> list[int]:
        """The versions the model's version policy serves: those on disk that the policy
        selects, less those unloaded through the repository API. Any other version is never
        loaded, so it is unknown (404, Triton's "is not found"), not loading (503: a client
        would retry it forever). Without a published config, every version on disk."""
        on_disk = found.index[model].versions
        config = self.configs.get(model)
        selected = config.version_policy.select(on_disk) if config is not None else on_disk
        state = found.states.get(model)
        excluded = set(state.excluded) if state is not None else set()
        return [v for v in selected if v not in excluded]

    def resolve_version(self, model: str, version: str | None) -> int:
        """An explicit version must exist; otherwise the newest version with a live worker."""
        self.config(model)
        known = self.versions.get(model, {})
        if version:
            try:
                number = int(version)
            except ValueError:  # Triton's text (clients match on it)
                number = INT64_MAX + 1
            if not -INT64_MAX - 1 <= number <= INT64_MAX:  # Triton reads an int64 (stoll)
                raise invalid(
                    f"failed to get model version from specified version string '{version}'"
                )
            if number == -1:  # Triton's "latest"
                return self.resolve_version(model, None)
            if number not in known:
                raise self._missing(model, number)
            return number
        live = [v for v, instances in known.items() if instances > 0]
        if live:
            return max(live)
        if known:
            return max(known)
        if model in self.expected:
            raise self._missing(model, None)
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

    async def ready(self, model: str, version: str | None) -> bool:
        """``is_ready`` judged now: re-read first if a worker counted may have expired."""
        try:
            await self.current()
        except Exception:  # Redis unreachable: the last view answers (as the poll did)
            log.warning("model table could not be re-read for a readiness probe", exc_info=True)
        return self.is_ready(model, version)

    def is_ready(self, model: str, version: str | None) -> bool:
        if model not in self.configs:
            return False
        known = self.versions.get(model, {})
        if version:
            return version.isdigit() and known.get(int(version), 0) > 0
        return any(instances > 0 for instances in known.values())
