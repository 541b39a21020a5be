"""on_demand model control at the gateway: a request for a model that is not loaded waits for
its load instead of being refused.

The request records the model's demand (``shared.fleet.on_demand.demand``: one record however
many requests and gateways ask at once; the placer loads the model on one worker) and waits
until this process's model table shows a live version, or a load error for the model. The wait
is part of the request: its deadline and its queue time start at its arrival
(``gateway.core.dataplane``), and it is bounded by the request's own timeout and
``CONCH_GATEWAY_COLD_START_TIMEOUT_S``.

The table is refreshed by the change feed (a version newly ready is announced), so a waiter
wakes when the refresh lands; a lost notice costs at most a second: each waiter looks again,
and records the demand again, every second.
"""

from __future__ import annotations

import asyncio
import logging
import time

import redis.asyncio as aioredis

from gateway.core.model_table import ModelTable
from shared.fleet import on_demand
from shared.metrics import on_demand as od_metrics
from shared.model_config.ensemble_graph import composing_models, is_ensemble
from shared.wire.errors import ConchError, ErrorCode

log = logging.getLogger(__name__)

# How often a waiter looks again without a notice (and re-records the demand).
RECHECK_S = 1.0


class ColdStarts:
    def __init__(self, r: aioredis.Redis, table: ModelTable, timeout_s: float):
        self._redis = r
        self._table = table
        self._timeout_s = timeout_s
        # Set (and replaced) by every refresh of the table: a waiter takes the current one
        # before it looks, so a refresh between its look and its wait is not missed.
        self._refreshed = asyncio.Event()
        self._last_refresh = 0.0
        table.on_refresh(self._on_refresh)

    def _on_refresh(self) -> None:
        self._refreshed.set()
        self._refreshed = asyncio.Event()

    def loadable(self, model: str) -> bool:
        """In the repository index, loadable, and not failed: a miss this mode loads."""
        found = self._table.expectations
        entry = found.index.get(model)
        return entry is not None and not entry.error and model not in found.load_errors

    def _needed(self, model: str) -> list[str]:
        """The models to demand for ``model``: itself, or for an ensemble (published at start,
        ready once its steps are) the composing models that are not ready, through nested
        ensembles."""
        configs, needed, seen, todo = self._table.configs, [], set(), [model]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            config = configs.get(name)
            if config is not None and is_ensemble(config):
                todo.extend(composing_models(config))
            elif not self._table.is_ready(name, None):
                needed.append(name)
        return sorted(needed)

    def _settled(self, model: str, needed: list[str]) -> bool:
        failed = self._table.expectations.load_errors
        return self._table.is_ready(model, None) or any(m in failed for m in [model, *needed])

    async def _demand(self, needed: list[str]) -> None:
        for name in needed:
            await on_demand.demand(self._redis, name)

    async def ensure_loaded(self, model: str, limit_s: float | None = None) -> bool:
        """Wait for ``model`` to be loaded if it is not; True if the request waited (a miss).
        A model that is not loadable returns at once: the normal path answers it (unknown,
        failed to load). ``limit_s``: the request's own timeout, if it asked for one."""
        if self._table.is_ready(model, None):
            od_metrics.MODEL_DEMAND.labels("hit").inc()
            return False
        if not self.loadable(model):
            return False
        od_metrics.MODEL_DEMAND.labels("miss").inc()
        started = time.monotonic()
        budget = self._timeout_s if limit_s is None else min(self._timeout_s, limit_s)
        end = started + budget
        needed = self._needed(model)
        await self._demand(needed)
        while True:
            refreshed = self._refreshed
            if self._settled(model, needed):
                break
            left = end - time.monotonic()
            if left <= 0:
                raise ConchError(
                    ErrorCode.UNAVAILABLE,
                    f"model '{model}' was not loaded within {budget:g} s of the request "
                    "(on_demand mode; the request's timeout or "
                    "CONCH_GATEWAY_COLD_START_TIMEOUT_S bounds the wait)",
                )
            try:
                await asyncio.wait_for(refreshed.wait(), min(left, RECHECK_S))
            except TimeoutError:
                await self._look_again(needed)
        od_metrics.COLD_START_SECONDS.labels(model).observe(time.monotonic() - started)
        return True

    async def _look_again(self, needed: list[str]) -> None:
        """No notice for a second: record the demand again (the placer may have ended it) and
        re-read the table, once a second for the whole process."""
        try:
            await self._demand(needed)
            now = time.monotonic()
            if now - self._last_refresh >= RECHECK_S:
                self._last_refresh = now
                await self._table.refresh()
        except Exception:
            log.warning("cold start: could not look again; waiting on", exc_info=True)
