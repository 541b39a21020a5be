"""Copies that follow traffic: one more past the copies' capacity by half a copy's worth, one
fewer after an idle spell, never below min_copies, a pinned model never below one."""

from __future__ import annotations

import pytest

from shared.placement.copies import wanted

IDLE_UNLOAD_MS = 300_000


def target(
    queue_depth: int = 0,
    in_flight: int = 0,
    copies: int = 1,
    per_copy_capacity: int = 8,
    idle_ms: int = 0,
    idle_unload_ms: int = IDLE_UNLOAD_MS,
    min_copies: int = 1,
    pinned: bool = False,
) -> int:
    return wanted(
        queue_depth,
        in_flight,
        copies,
        per_copy_capacity,
        idle_ms,
        idle_unload_ms,
        min_copies,
        pinned,
    )


def test_a_model_with_no_copy_wants_one_when_asked_for() -> None:
    assert target(queue_depth=1, copies=0) == 1
    assert target(queue_depth=100, copies=0) == 1  # one at a time, even under a flood
    assert target(copies=0) == 0  # indexed, never asked for: stays unloaded
    assert target(copies=0, min_copies=3) == 0  # min_copies is of loaded models


def test_a_pinned_model_is_always_loaded() -> None:
    assert target(copies=0, pinned=True) == 1
    assert target(copies=1, pinned=True, idle_ms=10**9, min_copies=0) == 1


def test_one_more_copy_only_past_capacity_by_half_a_copy() -> None:
    # One copy of 8: its own 8 plus half a copy's 4 -> up above 12 waiting and executing.
    assert target(queue_depth=4, in_flight=8) == 1
    assert target(queue_depth=5, in_flight=8) == 2
    assert target(queue_depth=13) == 2
    # Two copies of 8: up above 20.
    assert target(queue_depth=12, in_flight=8, copies=2) == 2
    assert target(queue_depth=13, in_flight=8, copies=2) == 3
    # Capacity 1 (one instance, no batching): above 1.5 per copy.
    assert target(queue_depth=1, in_flight=1, per_copy_capacity=1, copies=1) == 2
    assert target(queue_depth=0, in_flight=1, per_copy_capacity=1, copies=1) == 1


def test_a_backlog_within_capacity_never_drops_a_copy() -> None:
    for depth in range(0, 20):
        assert target(queue_depth=depth, copies=2, idle_ms=0) >= 2


def test_one_fewer_after_an_idle_spell_with_nothing_waiting() -> None:
    assert target(copies=3, idle_ms=IDLE_UNLOAD_MS) == 2
    assert target(copies=3, idle_ms=IDLE_UNLOAD_MS - 1) == 3
    # Idle by the clock but work arrived: the copy stays.
    assert target(copies=3, idle_ms=IDLE_UNLOAD_MS * 2, queue_depth=1) == 3
    assert target(copies=3, idle_ms=IDLE_UNLOAD_MS * 2, in_flight=1) == 3


def test_never_below_min_copies() -> None:
    assert target(copies=1, idle_ms=10**9, min_copies=1) == 1
    assert target(copies=1, idle_ms=10**9, min_copies=0) == 0
    assert target(copies=2, idle_ms=10**9, min_copies=2) == 2


def test_below_min_copies_a_loaded_model_climbs_one_at_a_time() -> None:
    assert target(copies=1, min_copies=3) == 2
    assert target(copies=2, min_copies=3) == 3
    assert target(copies=1, min_copies=2, pinned=True) == 2


def test_an_idle_unload_setting_of_zero_never_unloads() -> None:
    assert target(copies=2, idle_ms=10**12, idle_unload_ms=0) == 2
    assert target(copies=1, idle_ms=10**12, idle_unload_ms=0, min_copies=0) == 1


def test_a_backlog_hovering_at_capacity_costs_no_load() -> None:
    """Ticks with the backlog between 5 and 12 around one copy of 8: no copy is added (without
    the margin, every tick past 8 would ask for one), and none is dropped while work flows."""
    copies = 1
    for tick in range(200):
        depth = 8 + (4 if tick % 7 == 0 else 0) - (3 if tick % 3 == 0 else 0)
        copies = target(queue_depth=depth, copies=copies, idle_ms=IDLE_UNLOAD_MS * 2)
        assert copies == 1


def test_traffic_up_then_gone_climbs_then_returns_to_one() -> None:
    copies = 1
    for _ in range(5):
        copies = target(queue_depth=100, copies=copies)
    assert copies == 6
    for _ in range(10):
        copies = target(copies=copies, idle_ms=IDLE_UNLOAD_MS)
    assert copies == 1


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("queue_depth", {"queue_depth": -1}),
        ("in_flight", {"in_flight": -1}),
        ("copies", {"copies": -1}),
        ("per_copy_capacity", {"per_copy_capacity": 0}),
        ("min_copies", {"min_copies": -1}),
    ],
)
def test_impossible_inputs_are_caller_errors(field: str, kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=f"{field} is "):
        target(**kwargs)  # type: ignore[arg-type]
