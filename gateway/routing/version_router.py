"""Version choice for one gateway process: the pure rules of ``gateway.routing.version_choice``
applied to this process's model table (which versions have live workers) and traffic table (weights,
shadow settings, draining versions). Both are in-memory copies, so routing costs no Redis round
trip."""

from __future__ import annotations

import random
from collections.abc import Callable

from gateway.core.model_table import ModelTable
from gateway.routing.traffic_table import TrafficTable
from gateway.routing.version_choice import (
    choose_shadow,
    choose_version,
    is_live,
    live_versions,
    route_point,
)


class VersionRouter:
    def __init__(
        self,
        table: ModelTable,
        traffic: TrafficTable,
        rng: Callable[[], float] = random.random,
    ):
        self._table = table
        self.traffic = traffic
        self._rng = rng

    def route(self, model: str, version: str | None, route_key: str | None) -> int:
        """An explicit version bypasses the weights; otherwise the weighted choice among live
        versions, else Triton's default (the newest live version)."""
        if version:
            return self._table.resolve_version(model, version)
        self._table.config(model)
        live = live_versions(model, self._table.versions.get(model, {}), self.traffic.draining)
        weights = self.traffic.weights.get(model)
        if weights:
            chosen = choose_version(weights, live, route_point(route_key, self._rng))
            if chosen is not None:
                return chosen
        if live:
            return max(live)
        return self._table.resolve_version(model, None)

    def shadow(self, model: str, version: str | None, chosen: int) -> int | None:
        """The version a copy of this request also goes to, or None (the data plane sends it)."""
        setting = self.traffic.shadows.get(model)
        if setting is None:
            return None
        instances = self._table.versions.get(model, {})
        shadow_live = is_live(model, setting.version, instances, self.traffic.draining)
        return choose_shadow(setting, bool(version), chosen, self._rng(), shadow_live)
