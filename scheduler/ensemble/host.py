"""What a scheduler needs to run ensembles: the composing models' readiness (which version a
step runs on) and the ensemble's own readiness.

An ensemble has no worker: every scheduler runs it. It is READY while its composing models are
(each step's model has a ready version: the one the step names, or any for -1): each scheduler
puts itself in the ensemble's readiness set on its refresh, with an expiry, so the gateways'
admission and readiness treat the ensemble like any model, and a scheduler that stops counting
stops counting within the expiry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import redis.asyncio as aioredis

from scheduler.ensemble.runner import EnsembleRunner
from scheduler.settings import SchedulerSettings
from shared.fleet import readiness
from shared.model_config import ModelConfig
from shared.model_config.ensemble_graph import steps_of

log = logging.getLogger(__name__)


class EnsembleHost:
    def __init__(
        self,
        r: aioredis.Redis,
        settings: SchedulerSettings,
        consumer: str,
        on_failure: Callable[[], None],
    ):
        self._redis = r
        self._consumer = consumer
        self._on_failure = on_failure
        self._gone_ms = settings.gone_bound_ms
        self._direct = settings.direct_path
        # Kept fresh by the heartbeat thread (``queue_marks``), like a worker's readiness.
        self._ttl_ms = settings.heartbeat_ttl_ms
        self._configs: Mapping[str, ModelConfig] = {}
        self._versions: Mapping[str, Mapping[int, int]] = {}
        self._marked: set[tuple[str, int]] = set()

    async def observe(
        self, configs: Mapping[str, ModelConfig], versions: Mapping[str, Mapping[int, int]]
    ) -> None:
        """The registry's configs and the fleet's live instances, as of the last refresh."""
        self._configs, self._versions = configs, versions
        # A version gone from the registry (unloaded) is no longer re-marked by the heartbeat
        # thread (``queue_marks``) and leaves the readiness set now: an unloaded ensemble is
        # not ready as soon as a scheduler hears of the unload, not a TTL later.
        gone = [p for p in self._marked if p[1] not in versions.get(p[0], {})]
        if not gone:
            return
        self._marked.difference_update(gone)
        try:
            await readiness.unmark_ready(self._redis, self._consumer, gone)
        except Exception:
            log.warning("could not leave an unloaded ensemble's readiness set; it expires")

    def resolve(self, model: str, wanted: int) -> tuple[ModelConfig, int] | None:
        """The composing model's config and the version a step runs on (None: not ready)."""
        config = self._configs.get(model)
        if config is None:
            return None
        live = [v for v, count in self._versions.get(model, {}).items() if count > 0]
        if wanted >= 0:
            return (config, wanted) if wanted in live else None
        return (config, max(live)) if live else None

    def runner(self, config: ModelConfig, version: int) -> Callable[[], EnsembleRunner]:
        return lambda: EnsembleRunner(
            self._redis,
            config,
            version,
            self._gone_ms,
            self.resolve,
            consumer=self._consumer,
            on_failure=self._on_failure,
            direct=self._direct,
        )

    async def mark(self, config: ModelConfig, versions: Mapping[int, int]) -> None:
        """Ready while every step's model is; not ready (at once) when one is not."""
        pairs = {(config.name, version): 1 for version in versions}
        ready = all(self.resolve(s.model, s.version) for s in steps_of(config))
        if ready and pairs:
            if not pairs.keys() <= self._marked:  # the heartbeat thread keeps marks fresh
                await readiness.mark_ready(
                    self._redis, self._consumer, pairs, self._ttl_ms, join_versions=False
                )
                self._marked.update(pairs)
        elif gone := [p for p in pairs if p in self._marked]:
            await readiness.unmark_ready(self._redis, self._consumer, gone)
            self._marked.difference_update(gone)
            log.warning(
                "ensemble not ready: a composing model has no ready version",
                extra={"model": config.name},
            )

    def queue_marks(self, pipe: Any) -> None:
        """The heartbeat thread's readiness marks for the ensembles this scheduler runs."""
        marked = {pair: 1 for pair in tuple(self._marked)}
        if marked:
            # The version set is the publisher's (``workers.loading.ensemble_load``).
            readiness.queue_ready(pipe, self._consumer, marked, self._ttl_ms, join_versions=False)

    async def unmark(self, queues: Mapping[tuple[str, int], object]) -> None:
        """Leave the readiness sets of the ensembles this scheduler ran (it is stopping)."""
        if self._marked:
            try:
                await readiness.unmark_ready(self._redis, self._consumer, list(self._marked))
            except Exception:
                log.warning("could not leave the ensembles' readiness sets; they expire")
            self._marked.clear()
