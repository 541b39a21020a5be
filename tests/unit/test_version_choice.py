"""Version choice is a pure function of weights, live versions and a point in [0, 1); so is the
choice of a shadow copy. ``VersionRouter`` applies them to this process's tables."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from gateway.routing.traffic_table import Shadow, TrafficTable
from gateway.routing.version_choice import (
    choose_shadow,
    choose_version,
    is_live,
    live_versions,
    route_point,
)
from gateway.routing.version_router import VersionRouter
from shared.model_config import parse_pbtxt
from shared.wire.errors import ConchError, ErrorCode

SIMPLE = parse_pbtxt(
    """
    name: "simple"
    platform: "onnxruntime_onnx"
    max_batch_size: 8
    input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
    """
)


def test_cumulative_shares_in_version_order() -> None:
    weights = {3: 20, 1: 80}
    assert choose_version(weights, {1, 3}, 0.0) == 1
    assert choose_version(weights, {1, 3}, 0.799) == 1
    assert choose_version(weights, {1, 3}, 0.8) == 3
    assert choose_version(weights, {1, 3}, 0.9999) == 3


def test_split_follows_the_weights() -> None:
    rng = random.Random(7)
    counts = Counter(choose_version({1: 80, 3: 20}, {1, 3}, rng.random()) for _ in range(20_000))
    assert abs(counts[1] / 20_000 - 0.8) < 0.01


def test_zero_weight_and_dead_versions_get_nothing() -> None:
    assert choose_version({1: 0, 2: 10}, {1, 2}, 0.0) == 2
    # A weighted version with no live worker: the others share its traffic.
    assert choose_version({1: 50, 2: 50}, {2}, 0.1) == 2
    assert choose_version({1: 50, 2: 50}, set(), 0.1) is None
    assert choose_version({}, {1}, 0.5) is None


def test_route_key_is_stable_and_spread() -> None:
    assert route_point("user-1") == route_point("user-1")
    points = [route_point(f"user-{i}") for i in range(2000)]
    assert all(0 <= p < 1 for p in points)
    assert abs(sum(p < 0.8 for p in points) / 2000 - 0.8) < 0.04
    assert route_point(None, rng=lambda: 0.25) == 0.25


class FakeTable:
    def __init__(self, versions: dict[int, int]):
        self.configs = {"simple": SIMPLE}
        self.versions = {"simple": versions}

    def config(self, model: str):
        if model not in self.configs:
            raise ConchError(ErrorCode.NOT_FOUND, f"unknown model '{model}'")
        return self.configs[model]

    def resolve_version(self, model: str, version: str | None) -> int:
        self.config(model)
        if version:
            if int(version) not in self.versions[model]:
                raise ConchError(ErrorCode.NOT_FOUND, f"version {version}")
            return int(version)
        return max(self.versions[model])


def router(versions: dict[int, int], point: float = 0.5) -> VersionRouter:
    # A traffic table never refreshed: routing reads only this process's copies.
    traffic = TrafficTable(None)  # type: ignore[arg-type]
    return VersionRouter(FakeTable(versions), traffic, rng=lambda: point)  # type: ignore[arg-type]


def test_explicit_version_bypasses_weights() -> None:
    p = router({1: 1, 3: 1})
    p.traffic.weights = {"simple": {3: 100}}
    assert p.route("simple", "1", None) == 1
    assert p.route("simple", None, None) == 3


def test_without_weights_the_newest_live_version_answers() -> None:
    assert router({1: 1, 3: 1}).route("simple", None, None) == 3
    assert router({1: 1, 3: 0}).route("simple", None, None) == 1


def test_draining_versions_are_routed_around() -> None:
    p = router({1: 1, 3: 1})
    p.traffic.draining = {("simple", 3)}
    assert p.route("simple", None, None) == 1
    p.traffic.weights = {"simple": {1: 50, 3: 50}}
    assert {p.route("simple", None, f"k{i}") for i in range(50)} == {1}


def test_sticky_route_key_picks_one_version() -> None:
    p = router({1: 1, 3: 1})
    p.traffic.weights = {"simple": {1: 50, 3: 50}}
    chosen = {p.route("simple", None, "tenant-a/user-9") for _ in range(20)}
    assert len(chosen) == 1


def test_unknown_model_is_404() -> None:
    with pytest.raises(ConchError) as caught:
        router({1: 1}).route("nope", None, None)
    assert caught.value.code == ErrorCode.NOT_FOUND


def test_live_versions_have_a_worker_and_are_not_draining() -> None:
    instances = {1: 2, 2: 0, 3: 1}
    assert live_versions("simple", instances, set()) == {1, 3}
    assert live_versions("simple", instances, {("simple", 3), ("other", 1)}) == {1}
    for version in (1, 2, 3, 4):
        assert is_live("simple", version, instances, {("simple", 3)}) == (version == 1)


def test_shadow_copies_a_share_of_weight_routed_requests() -> None:
    setting = Shadow(version=3, percent=10)
    assert choose_shadow(setting, pinned=False, chosen=1, draw=0.05, shadow_live=True) == 3
    assert choose_shadow(setting, pinned=False, chosen=1, draw=0.1, shadow_live=True) is None
    # A pinned request, one the shadow version answers anyway, or a shadow with no live worker:
    # no copy.
    assert choose_shadow(setting, pinned=True, chosen=1, draw=0.0, shadow_live=True) is None
    assert choose_shadow(setting, pinned=False, chosen=3, draw=0.0, shadow_live=True) is None
    assert choose_shadow(setting, pinned=False, chosen=1, draw=0.0, shadow_live=False) is None
    rng = random.Random(11)
    sent = sum(
        choose_shadow(setting, False, 1, rng.random(), True) is not None for _ in range(20_000)
    )
    assert abs(sent / 20_000 - 0.10) < 0.01


def test_router_shadow_reads_this_process_tables() -> None:
    p = router({1: 1, 3: 1}, point=0.01)
    assert p.shadow("simple", None, 1) is None  # no shadow configured
    p.traffic.shadows = {"simple": Shadow(version=3, percent=5)}
    assert p.shadow("simple", None, 1) == 3
    assert p.shadow("simple", "1", 1) is None
    p.traffic.draining = {("simple", 3)}
    assert p.shadow("simple", None, 1) is None
