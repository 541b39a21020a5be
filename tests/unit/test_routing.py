"""Version choice is a pure function of weights, live versions and a point in [0, 1)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import redis.asyncio as aioredis

from gateway.routing import Caller, TrafficPolicy, choose_version, route_point
from shared.errors import ConchError, ErrorCode
from shared.model_config import parse_pbtxt

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


def policy(versions: dict[int, int], point: float = 0.5) -> TrafficPolicy:
    # A client that never connects: routing reads only this process's copies.
    client = aioredis.Redis()
    return TrafficPolicy(client, FakeTable(versions), 0.25, True, rng=lambda: point)  # type: ignore[arg-type]


def test_explicit_version_bypasses_weights() -> None:
    p = policy({1: 1, 3: 1})
    p.routing.weights = {"simple": {3: 100}}
    assert p.route("simple", "1", Caller()) == 1
    assert p.route("simple", None, Caller()) == 3


def test_without_weights_the_newest_live_version_answers() -> None:
    assert policy({1: 1, 3: 1}).route("simple", None, Caller()) == 3
    assert policy({1: 1, 3: 0}).route("simple", None, Caller()) == 1


def test_draining_versions_are_routed_around() -> None:
    p = policy({1: 1, 3: 1})
    p.routing.draining = {("simple", 3)}
    assert p.route("simple", None, Caller()) == 1
    p.routing.weights = {"simple": {1: 50, 3: 50}}
    assert {p.route("simple", None, Caller(route_key=f"k{i}")) for i in range(50)} == {1}


def test_sticky_route_key_picks_one_version() -> None:
    p = policy({1: 1, 3: 1})
    p.routing.weights = {"simple": {1: 50, 3: 50}}
    chosen = {p.route("simple", None, Caller(route_key="tenant-a/user-9")) for _ in range(20)}
    assert len(chosen) == 1


def test_unknown_model_is_404() -> None:
    with pytest.raises(ConchError) as caught:
        policy({1: 1}).route("nope", None, Caller())
    assert caught.value.code == ErrorCode.NOT_FOUND
