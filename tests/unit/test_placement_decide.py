"""The on_demand placer's pure policy (shared/placement/decide.py): every branch."""

from __future__ import annotations

from typing import Any

from shared.fleet import on_demand
from shared.fleet.control import ACK_ERROR, ACK_OK, ControlAck, IndexEntry
from shared.fleet.on_demand import Placement, Resident
from shared.placement import decide
from shared.placement.decide import Action, Fleet, Policy, WorkerInfo

NOW = 1_000_000
MB = 1 << 20
POLICY = Policy(load_timeout_ms=60_000, idle_unload_ms=300_000, min_copies=1)


def onnx(size: int = 10 * MB, **kw: Any) -> IndexEntry:
    return IndexEntry(versions=[1], not_loaded=True, backend="onnxruntime", files_bytes=size, **kw)


def fleet(**kw: Any) -> Fleet:
    kw.setdefault("workers", {"w1": WorkerInfo("onnxruntime", 100 * MB)})
    kw.setdefault("index", {"m": onnx()})
    return Fleet(now_ms=NOW, **kw)


def run(state: Fleet, policy: Policy = POLICY) -> list[Action]:
    return decide.decide(state, policy)


def held(bytes_: int = 10 * MB, used: int = NOW, **kw: Any) -> Resident:
    return Resident(bytes=bytes_, last_used_ms=used, **kw)


def test_serves_own_backend_and_python_serves_python_based_backends() -> None:
    assert decide.serves("onnxruntime", "onnxruntime")
    assert decide.serves("python", "vllm")  # a Python-based backend
    assert not decide.serves("python", "onnxruntime")
    assert not decide.serves("pytorch", "onnxruntime")


def test_demand_loads_on_the_best_fitting_worker() -> None:
    workers = {
        "big": WorkerInfo("onnxruntime", 1000 * MB),
        "snug": WorkerInfo("onnxruntime", 20 * MB),
        "torch": WorkerInfo("pytorch", 15 * MB),
    }
    [action] = run(fleet(demands={"m": NOW - 5}, workers=workers))
    assert (action.kind, action.worker, action.reason) == ("load", "snug", on_demand.LOAD_DEMAND)


def test_measured_size_beats_files_size() -> None:
    workers = {"a": WorkerInfo("onnxruntime", 20 * MB), "b": WorkerInfo("onnxruntime", 200 * MB)}
    state = fleet(demands={"m": NOW}, workers=workers, measured={"m": 50 * MB})
    assert run(state)[0].worker == "b"


def test_python_worker_serves_a_python_based_backend() -> None:
    index = {"m": IndexEntry(backend="my_backend", files_bytes=1)}
    workers = {"py": WorkerInfo("python", 0), "ort": WorkerInfo("onnxruntime", 0)}
    [action] = run(fleet(demands={"m": NOW}, index=index, workers=workers))
    assert (action.kind, action.worker) == ("load", "py")


def test_no_worker_of_the_backend_waits_a_grace_then_fails_naming_it() -> None:
    workers = {"t": WorkerInfo("pytorch", 100 * MB)}
    [waiting] = run(fleet(demands={"m": NOW}, workers=workers))  # a stalled heartbeat, maybe
    assert waiting.kind == "wait"
    state = fleet(demands={"m": NOW - decide.NO_WORKER_GRACE_MS}, workers=workers)
    [action] = run(state)
    assert action.kind == "fail"
    assert "onnxruntime" in action.message and "no live worker serves" in action.message


def test_unknown_or_broken_model_fails() -> None:
    assert run(fleet(demands={"x": NOW}))[0].kind == "fail"
    state = fleet(demands={"m": NOW}, index={"m": onnx(error="bad config")})
    assert run(state)[0] == Action("fail", "m", message="bad config")


def test_no_room_anywhere_waits() -> None:
    pinned = {"big": held(95 * MB, pinned=True)}
    state = fleet(demands={"m": NOW}, resident={"w1": pinned})
    assert [a.kind for a in run(state)] == ["wait"]


def test_full_worker_loads_when_an_idle_model_can_go() -> None:
    state = fleet(demands={"m": NOW}, resident={"w1": {"old": held(95 * MB, used=1)}})
    [action] = [a for a in run(state) if a.model == "m"]
    assert (action.kind, action.message) == ("load", "evicting old")


def test_demand_of_a_ready_or_held_model_ends() -> None:
    assert run(fleet(demands={"m": NOW}, ready=frozenset({"m"})))[0].kind == "end"
    state = fleet(demands={"m": NOW}, resident={"w1": {"m": held()}})
    assert run(state)[0].kind == "end"


def test_load_error_after_the_demand_ends_it_an_older_one_is_retried() -> None:
    assert run(fleet(demands={"m": NOW - 10}, load_errors={"m": NOW - 5}))[0].kind == "end"
    [action] = run(fleet(demands={"m": NOW}, load_errors={"m": NOW - 5}))
    assert action.kind == "load" and action.clear_error


def test_two_demands_of_one_tick_do_not_share_the_same_free_memory() -> None:
    workers = {"a": WorkerInfo("onnxruntime", 15 * MB), "b": WorkerInfo("onnxruntime", 15 * MB)}
    index = {"m": onnx(), "n": onnx()}
    actions = run(fleet(demands={"m": NOW, "n": NOW + 1}, workers=workers, index=index))
    assert {a.worker for a in actions} == {"a", "b"}


def test_a_placement_in_progress_reserves_its_memory() -> None:
    placements = {"n": Placement(worker="w1", started_ms=NOW, message_id="x")}
    index = {"m": onnx(60 * MB), "n": onnx(60 * MB)}
    assert [a.kind for a in run(fleet(demands={"m": NOW}, placements=placements, index=index))] == [
        "wait"
    ]


def _placed(**kw: Any) -> dict[str, Placement]:
    kw.setdefault("worker", "w1")
    kw.setdefault("started_ms", NOW - 1000)
    return {"m": Placement(message_id="id", **kw)}


TWO = {"w1": WorkerInfo("onnxruntime", 100 * MB), "w2": WorkerInfo("onnxruntime", 100 * MB)}


def test_ack_ok_ends_the_placement() -> None:
    acks = {"m": [ControlAck(worker="w1", status=ACK_OK, loaded=[1])]}
    [action] = run(fleet(demands={"m": 1}, placements=_placed(), acks=acks))
    assert (action.kind, action.model) == ("end", "m")


def test_ack_of_another_worker_is_ignored() -> None:
    acks = {"m": [ControlAck(worker="w9", status=ACK_OK)]}
    assert run(fleet(placements=_placed(), acks=acks)) == []


def test_no_room_moves_the_load_elsewhere() -> None:
    acks = {"m": [ControlAck(worker="w1", status=ACK_ERROR, message="no room for m")]}
    [action] = run(fleet(workers=TWO, placements=_placed(), acks=acks))
    assert (action.kind, action.worker, action.tried) == ("load", "w2", ("w1",))
    assert action.reason == on_demand.LOAD_DEMAND


def test_no_room_on_every_worker_fails_a_demand_and_ends_a_copy() -> None:
    acks = {"m": [ControlAck(worker="w2", status=ACK_ERROR, message="no room")]}
    state = fleet(workers=TWO, placements=_placed(worker="w2", tried=["w1"]), acks=acks)
    [action] = run(state)
    assert action.kind == "fail" and "tried w1, w2" in action.message
    copy = _placed(worker="w2", tried=["w1"], reason=on_demand.LOAD_COPY)
    assert run(fleet(workers=TWO, placements=copy, acks=acks))[0].kind == "end"


def test_no_room_elsewhere_for_now_drops_the_placement_keeping_the_demand() -> None:
    acks = {"m": [ControlAck(worker="w1", status=ACK_ERROR, message="no room")]}
    resident = {"w2": {"p": held(95 * MB, pinned=True)}}
    state = fleet(workers=TWO, placements=_placed(), acks=acks, resident=resident)
    assert [a.kind for a in run(state)] == ["drop"]


def test_other_load_error_ends_the_placement() -> None:
    acks = {"m": [ControlAck(worker="w1", status=ACK_ERROR, message="bad onnx")]}
    [action] = run(fleet(workers=TWO, placements=_placed(), acks=acks))
    assert (action.kind, action.message) == ("end", "bad onnx")


def test_dead_worker_is_retried_elsewhere() -> None:
    workers = {"w2": TWO["w2"]}  # w1's heartbeat expired
    [action] = run(fleet(workers=workers, placements=_placed()))
    assert (action.kind, action.worker, action.reason) == ("load", "w2", on_demand.LOAD_RETRY)
    assert action.tried == ("w1",)


def test_slow_load_is_retried_after_the_timeout_only() -> None:
    assert run(fleet(workers=TWO, placements=_placed(started_ms=NOW - 59_000))) == []
    [action] = run(fleet(workers=TWO, placements=_placed(started_ms=NOW - 61_000)))
    assert (action.kind, action.worker, action.reason) == ("load", "w2", on_demand.LOAD_RETRY)


def test_dead_worker_and_none_left_fails_after_the_grace() -> None:
    assert run(fleet(workers={}, placements=_placed()))[0].kind == "drop"  # a stall, maybe
    old = _placed(started_ms=NOW - decide.NO_WORKER_GRACE_MS)
    assert run(fleet(workers={}, placements=old))[0].kind == "fail"


def test_held_without_an_answer_ends() -> None:
    state = fleet(placements=_placed(), resident={"w1": {"m": held()}})
    assert run(state)[0].kind == "end"


def test_one_action_per_model_per_tick() -> None:
    acks = {"m": [ControlAck(worker="w1", status=ACK_OK)]}
    actions = run(fleet(demands={"m": 1}, placements=_placed(), acks=acks))
    assert len(actions) == 1


def _hot(backlog: int, **kw: Any) -> Fleet:
    resident = {"w1": {"m": held(capacity=4, in_flight=4)}}
    return fleet(workers=TWO, resident=resident, backlog={"m": backlog}, **kw)


def test_hot_model_gets_a_copy_on_a_worker_without_it() -> None:
    [action] = run(_hot(backlog=10))
    assert (action.kind, action.worker, action.reason) == ("load", "w2", on_demand.LOAD_COPY)


def test_backlog_within_the_margin_adds_no_copy() -> None:
    assert run(_hot(backlog=1)) == []


def test_model_with_a_placement_gets_no_second_copy() -> None:
    placements = {"m": Placement(worker="w2", started_ms=NOW, reason=on_demand.LOAD_COPY)}
    assert run(_hot(backlog=50, placements=placements)) == []


def test_copy_wanted_without_room_does_nothing() -> None:
    resident = {"w1": {"m": held(capacity=1, in_flight=1)}, "w2": {"p": held(95 * MB, pinned=True)}}
    assert run(fleet(workers=TWO, resident=resident, backlog={"m": 5})) == []


def _two_copies(used1: int, used2: int, **kw: Any) -> dict[str, dict[str, Resident]]:
    return {"w1": {"m": held(used=used1, **kw)}, "w2": {"m": held(used=used2)}}


def test_idle_copy_is_unloaded_the_one_idle_longest() -> None:
    old = NOW - 400_000
    [action] = run(fleet(workers=TWO, resident=_two_copies(old, old + 1)))
    assert (action.kind, action.worker, action.reason) == ("unload", "w1", on_demand.UNLOAD_IDLE)


def test_copy_not_idle_long_enough_stays() -> None:
    recent = NOW - 100_000
    assert run(fleet(workers=TWO, resident=_two_copies(recent, recent))) == []


def test_last_copy_stays_at_min_copies_1_and_goes_at_0() -> None:
    resident = {"w1": {"m": held(used=1)}}
    assert run(fleet(resident=resident)) == []
    zero = Policy(load_timeout_ms=1, idle_unload_ms=1, min_copies=0)
    assert run(fleet(resident=resident), zero)[0].kind == "unload"


def test_idle_unload_0_never_unloads() -> None:
    never = Policy(load_timeout_ms=1, idle_unload_ms=0, min_copies=0)
    assert run(fleet(workers=TWO, resident=_two_copies(1, 1)), never) == []


def test_pinned_copy_is_never_unloaded() -> None:
    zero = Policy(load_timeout_ms=1, idle_unload_ms=1, min_copies=0)
    assert run(fleet(resident={"w1": {"m": held(used=1, pinned=True)}}), zero) == []
    # Pinned on w1, an idle unpinned copy on w2: w2's goes, never w1's.
    resident = {"w1": {"m": held(used=1, pinned=True)}, "w2": {"m": held(used=5)}}
    [action] = run(fleet(workers=TWO, resident=resident), zero)
    assert (action.kind, action.worker) == ("unload", "w2")


def test_copy_being_unloaded_is_not_counted_nor_unloaded_again() -> None:
    zero = Policy(load_timeout_ms=1, idle_unload_ms=1, min_copies=0)
    state = fleet(workers=TWO, resident=_two_copies(1, 2), unloading=frozenset({("m", "w1")}))
    [action] = run(state, zero)
    assert (action.kind, action.worker) == ("unload", "w2")


def test_dead_workers_copies_do_not_count() -> None:
    resident = _two_copies(1, 2)  # w2 dead: its resident set is ignored
    assert run(fleet(resident=resident)) == []


def test_index_entry_without_a_backend_fails_not_sent_to_a_python_worker() -> None:
    index = {"m": IndexEntry(versions=[1], files_bytes=1)}
    state = fleet(demands={"m": NOW}, index=index, workers={"py": WorkerInfo("python", 0)})
    [action] = run(state)
    assert action.kind == "fail" and "names no backend" in action.message


def test_copy_is_not_placed_on_a_worker_unloading_the_model() -> None:
    three = {**TWO, "w3": WorkerInfo("onnxruntime", 100 * MB)}
    resident = {"w1": {"m": held(capacity=1, in_flight=1)}}
    state = fleet(
        workers=three, resident=resident, backlog={"m": 9}, unloading=frozenset({("m", "w2")})
    )
    [action] = run(state)
    assert (action.kind, action.worker) == ("load", "w3")


def test_copy_of_a_model_missing_from_the_index_is_not_placed() -> None:
    resident = {"w1": {"x": held(capacity=1, in_flight=1)}}
    assert run(fleet(workers=TWO, resident=resident, backlog={"x": 9})) == []


def test_a_load_whose_only_worker_stalled_waits_for_it_within_the_grace() -> None:
    """The worker's heartbeat expired mid-load (a frozen process): no other worker serves the
    backend, so the placement is dropped and the demand waits, rather than failing the load."""
    placing = Placement(worker="gone", started_ms=NOW - 5_000)
    workers = {"t": WorkerInfo("pytorch", 100 * MB)}
    [dropped] = run(fleet(demands={"m": NOW - 5_000}, placements={"m": placing}, workers=workers))
    assert dropped.kind == "drop"
    old = NOW - decide.NO_WORKER_GRACE_MS
    [failed] = run(fleet(demands={"m": old}, placements={"m": placing}, workers=workers))
    assert failed.kind == "fail" and "no live worker serves" in failed.message
