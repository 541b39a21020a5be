"""The BLS client's view of the fleet: the published model configs and which versions have live
workers, kept in the model process so that a BLS call resolves its model without a Redis round
trip (three of them before: the registry's revision, the version sets, the readiness marks).

Re-read as the gateway's model table is (``gateway.core.model_table``, which a worker may not
import): when the change feed announces a change of the models (a config published, a version
newly ready or unmarked), on every (re)subscription and on the feed's slow safety poll. A worker
that dies announces nothing: the view keeps each live worker's heartbeat expiry and, once the
earliest of them has passed, the next look asks the feed for a re-read and goes on with the view
it has (a late heartbeat is not a dead worker; the admission script checks liveness atomically,
so a stale view can only cost a correct UNAVAILABLE). ``is_model_ready`` re-reads first when the
view is stale, as the gateway's readiness probes do.

A miss (a model not in the view, or no ready version of it) is judged on a fresh read, never on
the view: a model loaded a moment ago is found, and an error says what Redis says now.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from shared.fleet import change_feed, model_registry, readiness
from shared.fleet.change_feed import ChangeFeed
from shared.model_config import ModelConfig
from shared.runtime import clock
from shared.wire import keys
from shared.wire.errors import ConchError, ErrorCode


class BlsModels:
    def __init__(self, r: aioredis.Redis, feed: ChangeFeed | None = None):
        self._redis = r
        self._feed = feed
        self._rev = -1
        self.configs: dict[str, ModelConfig] = {}
        # model -> version -> live instances (0: known, no live worker), as last read.
        self._versions: dict[str, dict[int, int]] = {}
        # When the earliest heartbeat expiry counted in ``_versions`` passes (ms since epoch);
        # 0 until the first read.
        self._stale_at: float = 0.0
        self._asked = False
        if feed is not None:
            feed.on(change_feed.MODELS, self.refresh)

    @property
    def stale(self) -> bool:
        return clock.now_ms() > self._stale_at

    async def refresh(self) -> None:
        rev = int(await self._redis.get(keys.models_rev()) or 0)
        if rev != self._rev or not self.configs:
            self._rev, self.configs = await model_registry.read_models(self._redis)
        self._versions, self._stale_at = await readiness.live_view(self._redis, list(self.configs))
        self._asked = False

    def _versions_now(self) -> dict[str, dict[int, int]]:
        """The view; once it may be stale, a re-read is asked for (once) and this view kept."""
        if self.stale and not self._asked and self._feed is not None and self._stale_at > 0:
            self._asked = True
            self._feed.kick(change_feed.MODELS)
        return self._versions

    def _lookup(self, model: str, version: int) -> tuple[ModelConfig, int] | None:
        config = self.configs.get(model)
        if config is None:
            return None
        ready = sorted(v for v, n in self._versions_now().get(model, {}).items() if n > 0)
        if version >= 0:
            return (config, version) if version in ready else None
        return (config, ready[-1]) if ready else None

    async def resolve(self, model: str, version: int) -> tuple[ModelConfig, int]:
        """The model's config and the version to call (-1: the latest ready one); a miss is
        judged on a fresh read. Raises NOT_FOUND / UNAVAILABLE as Triton answers them."""
        if self._feed is not None and self._stale_at > 0:
            found = self._lookup(model, version)
            if found is not None:
                return found
        await self.refresh()
        found = self._lookup(model, version)
        if found is not None:
            return found
        if model not in self.configs:
            raise ConchError(
                ErrorCode.NOT_FOUND, f"Request for unknown model: '{model}' is not found"
            )
        wanted = "" if version < 0 else f" version {version}"
        raise ConchError(ErrorCode.UNAVAILABLE, f"Request for model '{model}'{wanted}: not ready")

    def ready_now(self, model: str, version: int) -> bool | None:
        """``is_model_ready`` from the view, or None when it must be read first (none yet, or
        stale). Plain reads of dicts the refresh replaces whole: safe from another thread."""
        if self._feed is None or self._stale_at == 0 or self.stale:
            return None
        return self._ready(model, version)

    async def ready(self, model: str, version: int) -> bool:
        if self._feed is None or self._stale_at == 0 or self.stale:
            await self.refresh()
        return self._ready(model, version)

    def _ready(self, model: str, version: int) -> bool:
        live = [v for v, n in self._versions.get(model, {}).items() if n > 0]
        return bool(live) if version < 0 else version in live
