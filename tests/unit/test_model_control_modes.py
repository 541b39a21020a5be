"""The pure parts of Triton's model control modes: the poll's diff, explicit mode's start set,
what strict readiness waits for, the settings' checks and the gateway's exit timeout."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.settings import GatewaySettings, graceful_shutdown_s
from shared import model_config
from shared.fleet.control import DesiredState, IndexEntry
from shared.fleet.expected_models import Expectations, expected
from shared.wire.errors import ConchError
from workers.loading.poll import Changes, changed_versions, diff, version_prints
from workers.loading.start_set import missing, start_set
from workers.settings import WorkerSettings


def test_the_poll_sees_added_changed_and_removed_models() -> None:
    before = {"a": "1", "b": "2", "c": "3"}
    after = {"a": "1", "b": "2b", "d": "4"}
    assert diff(before, after) == Changes(added=["d"], changed=["b"], removed=["c"])
    assert not diff(before, dict(before))
    assert diff({}, {"x": "1"}).added == ["x"]


def test_a_version_whose_files_changed_is_reloaded_and_new_ones_are_not() -> None:
    assert changed_versions({1: "a", 2: "b"}, {1: "a", 2: "B", 3: "c"}) == {2}
    assert changed_versions({1: "a"}, {}) == set()


def test_version_prints_follow_the_files_of_each_version(tmp_path: Path) -> None:
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "model.onnx").write_bytes(b"one")
    (tmp_path / "configs").mkdir()
    first = version_prints(tmp_path)
    assert set(first) == {1}
    (tmp_path / "1" / "model.onnx").write_bytes(b"one, longer")
    (tmp_path / "2").mkdir()
    second = version_prints(tmp_path)
    assert set(second) == {1, 2} and second[1] != first[1]


def _config(name: str, steps: list[str] | None = None) -> model_config.ModelConfig:
    if steps is None:
        return model_config.from_json({"name": name, "backend": "onnxruntime"}, source=name)
    return model_config.from_json(
        {
            "name": name,
            "platform": "ensemble",
            "ensemble_scheduling": {
                "step": [
                    {"model_name": s, "model_version": -1, "input_map": {}, "output_map": {}}
                    for s in steps
                ]
            },
        },
        source=name,
    )


CONFIGS = {n: _config(n) for n in ("a", "b", "c", "d")} | {"ens": _config("ens", ["c", "d"])}


def test_explicit_mode_loads_the_named_models_and_what_the_fleet_loaded() -> None:
    assert start_set(CONFIGS, [], {}) == set()
    assert start_set(CONFIGS, ["*"], {}) == set(CONFIGS)
    assert start_set(CONFIGS, ["a"], {}) == {"a"}
    # A load through the API is remembered; an unload wins over --load-model.
    loaded, unloaded = DesiredState(), DesiredState(unloaded=True)
    assert start_set(CONFIGS, ["a"], {"b": loaded, "a": unloaded}) == {"b"}
    assert start_set(CONFIGS, ["*"], {"a": unloaded}) == set(CONFIGS) - {"a"}
    # A state of a model no repository holds loads nothing.
    assert start_set(CONFIGS, [], {"gone": loaded}) == set()


def test_an_ensemble_brings_its_composing_models() -> None:
    assert start_set(CONFIGS, ["ens"], {}) == {"ens", "c", "d"}


def test_a_load_model_no_repository_holds_is_reported() -> None:
    assert missing(["a", "*", "nope"], CONFIGS) == ["nope"]


def test_strict_readiness_does_not_wait_for_a_model_explicit_mode_left_unloaded() -> None:
    index = {
        "a": IndexEntry(versions=[1]),
        "b": IndexEntry(versions=[1], not_loaded=True),
        "c": IndexEntry(versions=[1], not_loaded=True),
        "dup": IndexEntry(error="model 'dup' is not unique across all model repositories"),
    }
    found = Expectations(scanned=True, index=index, states={"c": DesiredState()})
    assert expected(found) == {"a", "c"}  # c was loaded through the API since
    unloaded = Expectations(scanned=True, index=index, states={"a": DesiredState(unloaded=True)})
    assert expected(unloaded) == set()


def test_the_control_mode_is_checked_and_read_in_any_case() -> None:
    worker = WorkerSettings.from_env({"CONCH_WORKER_MODEL_CONTROL_MODE": "EXPLICIT"})
    assert worker.model_control_mode == "explicit"
    assert GatewaySettings().model_control_mode == "none"  # Triton's default
    with pytest.raises(ConchError, match="CONCH_WORKER_MODEL_CONTROL_MODE is 'sometimes'"):
        WorkerSettings.from_env({"CONCH_WORKER_MODEL_CONTROL_MODE": "sometimes"})
    with pytest.raises(ConchError, match="CONCH_GATEWAY_MODEL_CONTROL_MODE is 'x'"):
        GatewaySettings.from_env({"CONCH_GATEWAY_MODEL_CONTROL_MODE": "x"})
    with pytest.raises(ConchError, match="REPOSITORY_POLL_SECS"):
        WorkerSettings.from_env({"CONCH_WORKER_REPOSITORY_POLL_SECS": "0"})


def test_the_exit_timeout_bounds_the_gateways_drain() -> None:
    assert graceful_shutdown_s(GatewaySettings(exit_timeout_s=5)) == 5
    assert graceful_shutdown_s(GatewaySettings(exit_timeout_s=600)) == 35  # the deadline's bound
