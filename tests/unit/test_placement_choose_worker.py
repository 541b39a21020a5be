"""Which worker loads a model: live, of its backend, not excluded; fit without eviction (best
fit, then load), else the cheapest LRU eviction, then load; None when none can hold it."""

from __future__ import annotations

import random

import pytest

from shared.placement import choose_worker, eviction
from shared.placement.choose_worker import Choice, WorkerView
from shared.placement.eviction import Resident

ORT = frozenset({"onnxruntime"})


def worker(
    wid: str,
    budget: int = 100,
    resident: tuple[Resident, ...] = (),
    load: float = 0.0,
    backends: frozenset[str] = ORT,
    live: bool = True,
) -> WorkerView:
    return WorkerView(wid, backends, budget, resident, load, live)


def choose(need: int, workers: list[WorkerView], exclude: tuple[str, ...] = ()) -> str | None:
    return choose_worker.choose(need, workers, exclude, backend="onnxruntime")


def test_free_bytes_are_the_budget_less_the_resident_models() -> None:
    assert worker("w", 100, (Resident("a", 30, 1), Resident("b", 25, 2))).free_bytes == 45


def test_only_live_workers_of_the_backend_not_excluded() -> None:
    workers = [
        worker("dead", live=False),
        worker("python", backends=frozenset({"python", "vllm"})),
        worker("holds-a-copy"),
        worker("ok", budget=50),
    ]
    assert choose(10, workers, exclude=("holds-a-copy",)) == "ok"
    assert choose(10, workers, exclude=("holds-a-copy", "ok")) is None
    assert choose_worker.choose(10, workers, backend="vllm") == "python"
    assert choose_worker.choose(10, workers, backend="tensorrt") is None


def test_best_fit_leaves_the_least_free_memory() -> None:
    workers = [worker("roomy", 1000), worker("snug", 120), worker("small", 30)]
    assert choose(100, workers) == "snug"  # "small" cannot hold it; "roomy" keeps its room


def test_equal_fit_goes_to_the_least_loaded_then_by_id() -> None:
    assert choose(10, [worker("a", load=3.0), worker("b", load=1.0), worker("c", load=2.0)]) == "b"
    assert choose(10, [worker("b"), worker("a")]) == "a"


def test_fitting_without_eviction_beats_a_better_loaded_worker_that_must_evict() -> None:
    full = worker("full-idle", 100, (Resident("cold", 90, 1),), load=0.0)
    busy = worker("busy", 100, (Resident("hot", 50, 9),), load=5.0)
    assert choose(40, [full, busy]) == "busy"


def test_when_eviction_is_needed_the_coldest_models_are_given_up() -> None:
    warm = worker("warm", 100, (Resident("w1", 60, 500), Resident("w2", 30, 600)))
    cold = worker("cold", 100, (Resident("c1", 60, 100), Resident("c2", 30, 700)), load=9.0)
    choice = choose_worker.plan(50, [warm, cold], backend="onnxruntime")
    assert choice == Choice("cold", (Resident("c1", 60, 100),))


def test_equal_recency_lost_prefers_fewer_unloads_then_load() -> None:
    many = worker("many", 100, (Resident("a", 30, 5), Resident("b", 30, 5), Resident("c", 40, 9)))
    one = worker("one", 100, (Resident("x", 60, 5), Resident("y", 40, 9)), load=3.0)
    # Both lose models last used at 5; "many" unloads two, "one" unloads one.
    assert choose(60, [many, one]) == "one"
    twin = worker("twin", 100, (Resident("x", 60, 5), Resident("y", 40, 9)), load=1.0)
    assert choose(60, [many, one, twin]) == "twin"


def test_a_worker_whose_room_is_held_by_busy_models_is_passed_over() -> None:
    busy = worker(
        "busy",
        100,
        (Resident("p", 40, 1, pinned=True), Resident("s", 40, 1, live_sequences=1)),
    )
    idle = worker("idle", 100, (Resident("old", 80, 50),))
    assert choose(50, [busy, idle]) == "idle"
    assert choose(50, [busy]) is None


def test_none_when_the_model_is_larger_than_every_budget() -> None:
    assert choose(101, [worker("a"), worker("b")]) is None
    assert choose(1, []) is None


def test_the_choice_does_not_depend_on_the_order_of_the_workers() -> None:
    rng = random.Random(31)
    for _ in range(100):
        workers = [
            worker(
                f"w{i}",
                rng.randint(50, 200),
                tuple(
                    Resident(f"m{i}-{j}", rng.randint(5, 60), rng.randint(0, 30))
                    for j in range(rng.randint(0, 4))
                ),
                float(rng.randint(0, 3)),
            )
            for i in range(rng.randint(1, 6))
        ]
        need = rng.randint(1, 120)
        expected = choose_worker.plan(need, workers, backend="onnxruntime")
        if expected is not None:
            chosen = next(w for w in workers if w.id == expected.worker)
            planned = eviction.choose(chosen.resident, need, chosen.budget_bytes)
            assert planned is not None and tuple(planned) == expected.evict
        else:
            assert all(eviction.choose(w.resident, need, w.budget_bytes) is None for w in workers)
        for _ in range(3):
            rng.shuffle(workers)
            assert choose_worker.plan(need, workers, backend="onnxruntime") == expected


def test_a_negative_estimate_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match="model_bytes_estimate is -5"):
        choose(-5, [worker("a")])
