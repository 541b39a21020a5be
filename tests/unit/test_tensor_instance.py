"""TensorModelInstance: one tensor call per batch, concatenated and split along the batch dim.

A fake model records what it was called with, so each test can see exactly what the backend ran
and what each request got back.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from shared.model_config import ModelConfig, parse_pbtxt
from shared.wire.errors import ConchError, ErrorCode
from workers.backend import Execution, ModelRequest, TensorModelInstance


def add_sub_config(max_batch_size: int = 8) -> ModelConfig:
    return parse_pbtxt(
        f"""
        name: "add_sub"
        platform: "onnxruntime_onnx"
        max_batch_size: {max_batch_size}
        input [
          {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] }},
          {{ name: "INPUT1" data_type: TYPE_INT32 dims: [ 4 ] }}
        ]
        output [
          {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] }},
          {{ name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 4 ] }}
        ]
        """
    )


class AddSub(TensorModelInstance):
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1; records every call."""

    def __init__(
        self,
        config: ModelConfig,
        fail: Callable[[dict[str, np.ndarray]], Exception | None] | None = None,
    ):
        super().__init__(config)
        self.calls: list[tuple[dict[str, np.ndarray], list[str]]] = []
        self._fail = fail

    def run(self, inputs: dict[str, np.ndarray], output_names: list[str]) -> dict[str, np.ndarray]:
        self.calls.append(({k: v.copy() for k, v in inputs.items()}, list(output_names)))
        if self._fail is not None and (error := self._fail(inputs)) is not None:
            raise error
        a, b = inputs["INPUT0"], inputs["INPUT1"]
        return {"OUTPUT0": a + b, "OUTPUT1": a - b}


def req(
    rid: str, rows: int, start: int = 0, outputs: tuple[str, ...] = ("OUTPUT0", "OUTPUT1")
) -> ModelRequest:
    a = np.arange(start, start + 4 * rows, dtype=np.int32).reshape(rows, 4)
    return ModelRequest(rid, {"INPUT0": a, "INPUT1": np.full_like(a, 10)}, list(outputs))


def expect_add_sub(request: ModelRequest, outputs: dict[str, np.ndarray]) -> None:
    a, b = request.inputs["INPUT0"], request.inputs["INPUT1"]
    expected = {"OUTPUT0": a + b, "OUTPUT1": a - b}
    assert set(outputs) == set(request.requested_outputs)
    for name in request.requested_outputs:
        assert outputs[name].shape == a.shape
        assert np.array_equal(outputs[name], expected[name])


# --- batched execution ---------------------------------------------------------------------------


def test_a_batch_runs_once_on_the_concatenated_inputs() -> None:
    model = AddSub(add_sub_config())
    requests = [req("a", 1, 0), req("b", 3, 100), req("c", 2, 200)]
    execution = model.execute(requests)
    assert len(model.calls) == 1
    inputs, _ = model.calls[0]
    assert inputs["INPUT0"].shape == (6, 4)
    assert np.array_equal(inputs["INPUT0"], np.concatenate([r.inputs["INPUT0"] for r in requests]))
    assert isinstance(execution, Execution)
    assert len(execution.results) == 3


def test_each_request_gets_its_own_rows_back_in_order() -> None:
    model = AddSub(add_sub_config())
    requests = [req("a", 1, 0), req("b", 3, 100), req("c", 2, 200)]
    execution = model.execute(requests)
    for request, result in zip(requests, execution.results, strict=True):
        assert result.error is None
        expect_add_sub(request, result.outputs)


def test_the_model_is_asked_for_the_union_of_requested_outputs_in_first_seen_order() -> None:
    model = AddSub(add_sub_config())
    model.execute([req("a", 1, outputs=("OUTPUT1",)), req("b", 1, outputs=("OUTPUT0", "OUTPUT1"))])
    assert model.calls[0][1] == ["OUTPUT1", "OUTPUT0"]


def test_each_request_gets_only_the_outputs_it_asked_for() -> None:
    model = AddSub(add_sub_config())
    requests = [req("a", 2, outputs=("OUTPUT1",)), req("b", 1, 50, outputs=("OUTPUT0",))]
    results = model.execute(requests).results
    assert list(results[0].outputs) == ["OUTPUT1"]
    assert list(results[1].outputs) == ["OUTPUT0"]
    expect_add_sub(requests[0], results[0].outputs)
    expect_add_sub(requests[1], results[1].outputs)


def test_batched_execution_reports_phase_durations() -> None:
    execution = AddSub(add_sub_config()).execute([req("a", 1), req("b", 1)])
    assert execution.compute_input_ns >= 0
    assert execution.compute_infer_ns > 0
    assert execution.compute_output_ns >= 0


def test_inputs_are_concatenated_in_the_configs_order_of_names() -> None:
    model = AddSub(add_sub_config())
    first = ModelRequest(
        "a",
        {"INPUT1": np.ones((1, 4), np.int32), "INPUT0": np.zeros((1, 4), np.int32)},
        ["OUTPUT0"],
    )
    model.execute([first, req("b", 1)])
    assert list(model.calls[0][0]) == ["INPUT0", "INPUT1"]


# --- errors --------------------------------------------------------------------------------------


def test_a_model_failure_fails_every_request_of_the_batch_as_internal() -> None:
    model = AddSub(add_sub_config(), fail=lambda _: RuntimeError("CUDA out of memory"))
    results = model.execute([req("a", 1), req("b", 2)]).results
    assert len(results) == 2
    for result in results:
        assert result.outputs == {}
        assert result.error is not None
        assert result.error.code is ErrorCode.INTERNAL
        assert "add_sub" in result.error.message
        assert "CUDA out of memory" in result.error.message


def test_a_conch_error_from_the_model_is_passed_on_unchanged() -> None:
    error = ConchError(ErrorCode.INVALID_ARG, "values must be positive")
    model = AddSub(add_sub_config(), fail=lambda _: error)
    results = model.execute([req("a", 1), req("b", 1)]).results
    assert [r.error for r in results] == [error, error]


def test_run_one_at_a_time_a_failure_only_fails_its_own_request() -> None:
    def fail_on_negative(inputs: dict[str, np.ndarray]) -> Exception | None:
        return ValueError("negative input") if (inputs["INPUT0"] < 0).any() else None

    model = AddSub(add_sub_config(max_batch_size=0), fail=fail_on_negative)
    good = ModelRequest(
        "good", {"INPUT0": np.ones(4, np.int32), "INPUT1": np.ones(4, np.int32)}, ["OUTPUT0"]
    )
    bad = ModelRequest(
        "bad", {"INPUT0": -np.ones(4, np.int32), "INPUT1": np.ones(4, np.int32)}, ["OUTPUT0"]
    )
    results = model.execute([good, bad, good]).results
    assert results[0].error is None and results[2].error is None
    assert np.array_equal(results[0].outputs["OUTPUT0"], np.full(4, 2, np.int32))
    assert results[1].error is not None
    assert results[1].error.code is ErrorCode.INTERNAL
    assert "negative input" in results[1].error.message


# --- one at a time -------------------------------------------------------------------------------


def test_without_batching_each_request_runs_alone_on_its_own_tensors() -> None:
    model = AddSub(add_sub_config(max_batch_size=0))
    requests = [
        ModelRequest(
            str(i),
            {"INPUT0": np.full(4, i, np.int32), "INPUT1": np.arange(4, dtype=np.int32)},
            ["OUTPUT0", "OUTPUT1"],
        )
        for i in range(3)
    ]
    execution = model.execute(requests)
    assert len(model.calls) == 3
    for request, (inputs, names), result in zip(
        requests, model.calls, execution.results, strict=True
    ):
        assert inputs["INPUT0"].shape == (4,)  # no batch dimension added
        assert names == request.requested_outputs
        expect_add_sub(request, result.outputs)
    assert execution.compute_infer_ns > 0


def test_a_single_request_runs_as_is_without_concatenation() -> None:
    model = AddSub(add_sub_config())
    request = req("only", 3, outputs=("OUTPUT1",))
    [result] = model.execute([request]).results
    assert len(model.calls) == 1
    assert model.calls[0][1] == ["OUTPUT1"]
    assert list(result.outputs) == ["OUTPUT1"]
    expect_add_sub(request, result.outputs)


@pytest.mark.parametrize("rows", [1, 2, 8])
def test_batch_size_of_a_request_is_its_first_dimension(rows: int) -> None:
    assert req("x", rows).batch_size == rows


def test_batch_size_of_a_request_without_inputs_or_with_scalars_is_1() -> None:
    assert ModelRequest("x", {}, []).batch_size == 1
    assert ModelRequest("x", {"S": np.array(5)}, []).batch_size == 1


# --- a model that breaks the contract ------------------------------------------------------------


class Broken(AddSub):
    """Returns what ``make`` builds from the batched inputs instead of the real outputs."""

    def __init__(self, config: ModelConfig, make: Callable[[np.ndarray], dict[str, np.ndarray]]):
        super().__init__(config)
        self._make = make

    def run(self, inputs: dict[str, np.ndarray], output_names: list[str]) -> dict[str, np.ndarray]:
        super().run(inputs, output_names)
        return self._make(inputs["INPUT0"])


def test_one_at_a_time_a_missing_output_is_an_internal_error() -> None:
    model = Broken(add_sub_config(), lambda a: {"OUTPUT0": a})
    [result] = model.execute([req("a", 1, outputs=("OUTPUT1",))]).results
    assert result.error is not None
    assert result.error.code is ErrorCode.INTERNAL


def test_in_a_batch_a_missing_output_is_an_internal_error_for_every_request() -> None:
    model = Broken(add_sub_config(), lambda a: {"OUTPUT0": a})
    results = model.execute([req("a", 1, outputs=("OUTPUT1",)), req("b", 2)]).results
    assert [r.error.code if r.error else None for r in results] == [ErrorCode.INTERNAL] * 2


def test_an_output_with_the_wrong_batch_dimension_is_an_error_not_a_short_slice() -> None:
    model = Broken(add_sub_config(), lambda a: {"OUTPUT0": a[:1], "OUTPUT1": a[:1]})
    second = model.execute([req("a", 1), req("b", 2)]).results[1]
    assert second.error is not None, f"got outputs of shape {second.outputs['OUTPUT0'].shape}"
    assert second.error.code is ErrorCode.INTERNAL
