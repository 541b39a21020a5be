"""The worker's pure parts of on_demand model control: its budget setting, the resident set it
publishes and evicts from, the index entry's backend and size, the "no room" answer, and the
control messages it skips (meant for another worker) without answering."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from shared.fleet import control
from shared.placement import budget, eviction
from shared.storage import repository
from workers.loading import on_demand_load
from workers.loading.control import ModelControl
from workers.loading.loader import LoadedVersion
from workers.loading.repository_index import entry_for, index_of
from workers.loading.resident import Residents, budget_bytes
from workers.sequence import occupancy
from workers.settings import WorkerSettings

SIMPLE = """name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: {batch}
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }} ]
instance_group [ {{ count: {count} kind: KIND_CPU }} ]
"""


def _model_dir(root: Path, name: str, batch: int = 8, count: int = 1, size: int = 100) -> Path:
    path = root / name
    (path / "1").mkdir(parents=True)
    (path / "config.pbtxt").write_text(SIMPLE.format(name=name, batch=batch, count=count))
    (path / "1" / "model.onnx").write_bytes(b"x" * size)
    return path


def _loaded(root: Path, name: str, version: int = 1, **shape: int) -> LoadedVersion:
    model = repository.read_model(_model_dir(root, name, **shape), auto_complete=False)
    lv = LoadedVersion(model, version)
    lv.instances = [object()] * shape.get("count", 1)  # type: ignore[list-item]
    return lv


# --- settings ---------------------------------------------------------------------------------


def test_on_demand_mode_and_a_budget_are_accepted() -> None:
    settings = WorkerSettings(model_control_mode="ON_DEMAND", model_memory_budget="512MiB")
    assert settings.model_control_mode == control.MODE_ON_DEMAND
    assert budget_bytes(settings) == 512 * 2**20


@pytest.mark.parametrize("text", ["lots", "0", "1.5", "12", "3 parsecs"])
def test_a_wrong_budget_is_refused_naming_the_setting(text: str) -> None:
    with pytest.raises(ValueError, match="CONCH_WORKER_MODEL_MEMORY_BUDGET") as caught:
        WorkerSettings(model_control_mode="on_demand", model_memory_budget=text)
    assert repr(text) in str(caught.value)


def test_an_unset_budget_is_half_the_machine_in_on_demand_mode_and_none_elsewhere() -> None:
    assert budget_bytes(WorkerSettings(model_control_mode="explicit")) == 0
    half = budget_bytes(WorkerSettings(model_control_mode="on_demand"))
    assert half == budget.machine_memory_bytes() // 2


# --- the repository index ---------------------------------------------------------------------


def test_the_index_names_each_models_backend_and_files_size(tmp_path: Path) -> None:
    model = repository.read_model(_model_dir(tmp_path, "m", size=1000), auto_complete=False)
    entry = entry_for(model)
    assert entry.backend == "onnxruntime"
    config_size = (tmp_path / "m" / "config.pbtxt").stat().st_size
    assert entry.files_bytes == 1000 + config_size
    assert not entry.not_loaded
    scan = repository.ScanResult(models={"m": model}, errors={})
    marked = index_of(scan, {"m"})["m"]
    assert marked.not_loaded and marked.backend == "onnxruntime"
    assert marked.files_bytes == entry.files_bytes


# --- the resident set -------------------------------------------------------------------------


def test_the_resident_set_counts_use_executions_sequences_and_pins(tmp_path: Path) -> None:
    a = _loaded(tmp_path, "a", batch=4, count=2)
    b = _loaded(tmp_path, "b", batch=0)
    loaded = {("a", 1): a, ("b", 1): b}
    residents = Residents(budget=1000, on_demand=True)
    residents.loaded("a", 300, pinned=False)
    residents.loaded("b", 200, pinned=True)
    done = a.executing()
    busy = residents.snapshot(loaded)
    assert busy["a"].in_flight == 1 and busy["a"].capacity == 8
    assert busy["b"].pinned and busy["b"].capacity == 1 and busy["b"].bytes == 200
    done()
    assert a.in_flight == 0 and a.last_used_ms > 0
    occupancy.update("b", 1, "b-0", 2, 4, 0)
    try:
        idle = residents.snapshot(loaded)
        assert idle["a"].last_used_ms == a.last_used_ms
        assert idle["b"].live_sequences == 2
    finally:
        occupancy.forget("b", 1, "b-0")
    residents.forget("b")
    assert "b" not in residents.pinned


def test_eviction_goes_least_recently_used_first_and_spares_pinned_and_busy(
    tmp_path: Path,
) -> None:
    old, new, pin = (_loaded(tmp_path, n) for n in ("old", "new", "pin"))
    loaded = {("old", 1): old, ("new", 1): new, ("pin", 1): pin}
    residents = Residents(budget=300, on_demand=True)
    for name in ("old", "new", "pin"):
        residents.loaded(name, 100, pinned=name == "pin")
    old.last_used_ms, new.last_used_ms, pin.last_used_ms = 10**13, 2 * 10**13, 1
    chosen = eviction.choose(residents.eviction_view(loaded), 100, 300)
    assert [v.model for v in chosen or []] == ["old"]
    done = old.executing()  # executing: never evicted, the next oldest goes instead
    chosen = eviction.choose(residents.eviction_view(loaded), 100, 300)
    assert [v.model for v in chosen or []] == ["new"]
    view = residents.eviction_view(loaded)
    assert eviction.choose(view, 250, 300) is None
    message = on_demand_load.no_room("w1", "big", 250, residents, view)
    assert message.startswith("no room on worker w1 for model 'big': needs 250 bytes")
    assert "pinned 'pin' (100 bytes)" in message and "'old' (100 bytes)" in message
    done()


def test_the_resident_set_is_queued_only_in_on_demand_mode(tmp_path: Path) -> None:
    a = _loaded(tmp_path, "a")
    calls: list[tuple[str, Any]] = []
    pipe = SimpleNamespace(
        delete=lambda *x: calls.append(("delete", x)),
        hset=lambda *x, **kw: calls.append(("hset", kw["mapping"])),
        pexpire=lambda *x: calls.append(("pexpire", x)),
    )
    Residents(budget=10).queue(pipe, "w", {("a", 1): a}, 3000)
    assert calls == []
    residents = Residents(budget=10, on_demand=True)
    residents.loaded("a", 5, pinned=False)
    residents.queue(pipe, "w", {("a", 1): a}, 3000)
    assert [c[0] for c in calls] == ["delete", "hset", "pexpire"]
    assert set(calls[1][1]) == {"a"}


# --- control messages -------------------------------------------------------------------------


def test_a_message_meant_for_another_worker_is_not_answered() -> None:
    settings = WorkerSettings(model_control_mode="on_demand")
    host = SimpleNamespace(id="w1", settings=settings, loaded={})
    worker = ModelControl(host)
    other = control.new_message(control.LOAD, "m", target="w2")
    assert asyncio.run(worker.handle(other)) is None


def test_none_and_poll_still_refuse_load_and_unload() -> None:
    for mode in ("none", "poll"):
        host = SimpleNamespace(id="w1", settings=WorkerSettings(model_control_mode=mode))
        answer = asyncio.run(ModelControl(host).handle(control.new_message(control.LOAD, "m")))
        assert answer is not None and answer.message == control.NOT_EXPLICIT


def test_a_pinned_model_is_not_dropped_by_the_placer() -> None:
    host = SimpleNamespace(id="w1", settings=WorkerSettings(model_control_mode="on_demand"))
    residents = Residents(budget=10, on_demand=True)
    residents.loaded("m", 5, pinned=True)
    message = control.new_message(control.UNLOAD, "m", target="w1", reason="idle")
    answer = asyncio.run(on_demand_load.handle(host, residents, message))
    assert answer.status == control.ACK_ERROR and "pinned" in answer.message
