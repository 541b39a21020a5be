"""Which version answers a request, and whether a copy also goes to a shadow version: pure
functions of plain values (weights, live versions, a point in [0, 1), a random draw), so that
every rule can be tested without Redis or a server.

The point is random per request, or a hash of the request's route key, so that one key goes to
one version while the weights stand (stickiness).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Collection, Mapping

from gateway.routing.traffic_table import Shadow


def route_point(route_key: str | None, rng: Callable[[], float] = random.random) -> float:
    """A point in [0, 1): a stable hash of the route key, or random without one."""
    if not route_key:
        return rng()
    digest = hashlib.blake2b(route_key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def choose_version(weights: Mapping[int, int], live: Collection[int], point: float) -> int | None:
    """The version whose share of the cumulative weights (live versions with weight > 0, in
    version order) contains ``point``; None when no weighted version is live."""
    candidates = sorted((v, w) for v, w in weights.items() if w > 0 and v in live)
    total = sum(w for _, w in candidates)
    if total == 0:
        return None
    target = point * total
    reached = 0
    for version, weight in candidates:
        reached += weight
        if target < reached:
            return version
    return candidates[-1][0]


def live_versions(
    model: str, instances: Mapping[int, int], draining: Collection[tuple[str, int]]
) -> set[int]:
    """Versions with a live worker (``instances``: version -> live instances) that are not
    being unloaded."""
    return {v for v, n in instances.items() if n > 0 and (model, v) not in draining}


def is_live(
    model: str, version: int, instances: Mapping[int, int], draining: Collection[tuple[str, int]]
) -> bool:
    """Whether ``version`` is among ``live_versions`` (without building the set)."""
    return instances.get(version, 0) > 0 and (model, version) not in draining


def choose_shadow(
    setting: Shadow, pinned: bool, chosen: int, draw: float, shadow_live: bool
) -> int | None:
    """The version a copy of this request also goes to, or None. Only requests routed by
    weights are copied (``pinned``: the client named a version), never to the version that
    answers them anyway, a ``setting.percent`` share of them (``draw`` is uniform in [0, 1)),
    and only while the shadow version is live."""
    if pinned or setting.version == chosen:
        return None
    if draw * 100 >= setting.percent or not shadow_live:
        return None
    return setting.version
