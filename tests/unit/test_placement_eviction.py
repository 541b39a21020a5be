"""LRU eviction: the coldest idle models go first; pinned, executing and sequence-holding
models never; all or nothing."""

from __future__ import annotations

import random

import pytest

from shared.placement import eviction
from shared.placement.eviction import Resident


def names(victims: list[Resident] | None) -> list[str] | None:
    return None if victims is None else [v.model for v in victims]


def test_nothing_is_evicted_when_the_model_fits() -> None:
    resident = [Resident("a", 30, 1), Resident("b", 30, 2)]
    assert eviction.choose(resident, 40, 100) == []
    assert eviction.choose([], 100, 100) == []  # exactly full fits


def test_the_least_recently_used_goes_first() -> None:
    resident = [Resident("new", 30, 300), Resident("old", 30, 100), Resident("mid", 30, 200)]
    assert names(eviction.choose(resident, 20, 100)) == ["old"]
    assert names(eviction.choose(resident, 50, 100)) == ["old", "mid"]
    assert names(eviction.choose(resident, 100, 100)) == ["old", "mid", "new"]


def test_strictly_lru_even_when_a_younger_model_alone_would_make_room() -> None:
    resident = [Resident("old-small", 10, 1), Resident("young-big", 80, 2)]
    assert names(eviction.choose(resident, 50, 100)) == ["old-small", "young-big"]


@pytest.mark.parametrize(
    "busy",
    [
        Resident("x", 50, 1, pinned=True),
        Resident("x", 50, 1, in_flight=1),
        Resident("x", 50, 1, live_sequences=2),
    ],
)
def test_pinned_executing_and_sequence_holding_models_are_never_evicted(busy: Resident) -> None:
    assert not busy.evictable
    resident = [busy, Resident("idle", 40, 5)]
    # The busy model is the oldest, yet the younger idle one goes.
    assert names(eviction.choose(resident, 40, 100)) == ["idle"]
    # Room only the busy model could make: nothing is unloaded in vain.
    assert eviction.choose(resident, 60, 100) is None


def test_none_when_the_model_is_larger_than_the_budget() -> None:
    assert eviction.choose([Resident("a", 10, 1)], 101, 100) is None
    assert eviction.choose([], 101, 100) is None


def test_a_resident_set_over_its_budget_is_brought_back_under_it() -> None:
    # Measured sizes can grow past the budget (a model allocates after warm-up).
    resident = [Resident("a", 60, 1), Resident("b", 60, 2)]
    assert names(eviction.choose(resident, 0, 100)) == ["a"]
    assert names(eviction.choose(resident, 10, 100)) == ["a"]
    assert names(eviction.choose(resident, 50, 100)) == ["a", "b"]


def test_ties_on_recency_go_to_the_larger_then_by_name() -> None:
    resident = [Resident("b", 10, 7), Resident("c", 40, 7), Resident("a", 10, 7)]
    assert names(eviction.eviction_order(resident)) == ["c", "a", "b"]
    assert names(eviction.choose(resident, 55, 100)) == ["c"]
    assert names(eviction.choose(resident, 100, 100)) == ["c", "a", "b"]


def test_the_order_does_not_depend_on_the_input_order() -> None:
    resident = [Resident(f"m{i}", 10 + i % 3, i % 4) for i in range(12)]
    expected = names(eviction.choose(resident, 70, 140))
    for seed in range(5):
        shuffled = resident[:]
        random.Random(seed).shuffle(shuffled)
        assert names(eviction.choose(shuffled, 70, 140)) == expected


def test_the_victims_are_the_shortest_lru_prefix_that_makes_room() -> None:
    rng = random.Random(31)
    for _ in range(200):
        resident = [
            Resident(
                f"m{i}",
                rng.randint(1, 50),
                rng.randint(0, 20),
                pinned=rng.random() < 0.1,
                in_flight=int(rng.random() < 0.1),
            )
            for i in range(rng.randint(0, 10))
        ]
        budget = rng.randint(50, 300)
        need = rng.randint(0, 120)
        victims = eviction.choose(resident, need, budget)
        order = eviction.eviction_order(resident)
        free = budget - eviction.used_bytes(resident)
        if victims is None:
            assert need > free + sum(r.bytes for r in order)
            continue
        assert victims == order[: len(victims)]
        assert all(v.evictable for v in victims)
        assert need <= free + sum(v.bytes for v in victims)
        if victims:
            assert need > free + sum(v.bytes for v in victims[:-1])  # none more than needed


def test_a_negative_need_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match="need_bytes is -1"):
        eviction.choose([], -1, 100)
