"""Ragged batching: ``batch_input`` computations, scattering, the load-time checks, the shape
signature that lets ragged requests share a batch, and the preserve_ordering gate.

The values are those of Triton's ``model_config.proto`` examples, so a model written for Triton
sees the same tensors here.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from shared.model_config import ModelConfig, parse_pbtxt
from shared.model_config.input_check import check_inputs
from shared.wire import tensors
from shared.wire.errors import ConchError
from workers.backend import ModelRequest, TensorModelInstance
from workers.batches import ragged
from workers.batches.ordering import OrderGate
from workers.loading.warmup import warmup_batches

SOURCE = "models/r/config.pbtxt"
BASE = """\
name: "r"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


def config_with(kind: str, datatype: str = "TYPE_INT32", extra: str = "") -> ModelConfig:
    return parse_pbtxt(
        BASE
        + f'batch_input [ {{ kind: {kind} target_name: "INDEX" data_type: {datatype}\n'
        + '  source_input: "INPUT" } ]\n'
        + extra,
        SOURCE,
    )


def rows(*lengths: int) -> list[dict[str, np.ndarray]]:
    return [{"INPUT": np.arange(n, dtype=np.float32).reshape(1, n)} for n in lengths]


def batched(config: ModelConfig, requests: list[dict[str, np.ndarray]]) -> np.ndarray:
    parts = [p["INDEX"] for p in ragged.batch_inputs(config, requests)]
    return np.concatenate(parts)


def test_accumulated_element_count_is_tritons_example() -> None:
    # Triton's docs: requests [1, 3], [1, 4], [1, 5] give INDEX [3, 7, 12].
    config = config_with("BATCH_ACCUMULATED_ELEMENT_COUNT", "TYPE_FP32")
    index = batched(config, rows(3, 4, 5))
    assert index.tolist() == [3.0, 7.0, 12.0] and index.dtype == np.float32


def test_element_counts_with_and_without_zero() -> None:
    counts = batched(config_with("BATCH_ELEMENT_COUNT"), rows(3, 4, 5))
    assert counts.tolist() == [3, 4, 5] and counts.dtype == np.int32
    config = config_with("BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO", "TYPE_INT64")
    parts = [p["INDEX"].tolist() for p in ragged.batch_inputs(config, rows(3, 4, 5))]
    assert parts == [[0, 3], [7], [12]]
    assert batched(config, rows(3, 4, 5)).dtype == np.int64


def test_max_element_count_as_shape() -> None:
    config = config_with("BATCH_MAX_ELEMENT_COUNT_AS_SHAPE")
    parts = [p["INDEX"].shape for p in ragged.batch_inputs(config, rows(3, 6, 5))]
    assert parts == [(6,), (0,), (0,)]


def test_item_shape_and_flatten_are_the_protos_example() -> None:
    # A batch-2 input of shape [3, 1] and a batch-1 input of shape [2, 2].
    requests = [
        {"INPUT": np.zeros((2, 3, 1), np.float32)},
        {"INPUT": np.zeros((1, 2, 2), np.float32)},
    ]
    shape = batched(config_with("BATCH_ITEM_SHAPE"), requests)
    assert shape.tolist() == [[3, 1], [3, 1], [2, 2]]
    flat = batched(config_with("BATCH_ITEM_SHAPE_FLATTEN"), requests)
    assert flat.tolist() == [3, 1, 3, 1, 2, 2]


def test_ragged_input_is_concatenated_flat_and_scattered_back() -> None:
    config = config_with(
        "BATCH_ACCUMULATED_ELEMENT_COUNT",
        extra='batch_output [ { target_name: "OUTPUT" kind: BATCH_SCATTER_WITH_INPUT_SHAPE\n'
        + '  source_input: "INPUT" } ]\n',
    )
    requests = rows(3, 4, 5)
    flat = ragged.concatenate(config, "INPUT", [r["INPUT"] for r in requests])
    assert flat.shape == (12,)
    shapes = ragged.scatter_shapes(config, "OUTPUT", requests)
    assert shapes == [[1, 3], [1, 4], [1, 5]]
    parts = ragged.scatter(flat * 2, shapes)
    for request, part in zip(requests, parts, strict=True):
        assert np.array_equal(part, request["INPUT"] * 2)
    with pytest.raises(ValueError, match="has 11 elements; expected 12"):
        ragged.scatter(flat[:11], shapes)


class Doubler(TensorModelInstance):
    """Doubles the flat ragged input and reports the batch input it saw."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        self.seen: dict[str, np.ndarray] = {}

    def run(self, inputs: dict[str, np.ndarray], output_names: list[str]) -> dict[str, np.ndarray]:
        self.seen = inputs
        return {"OUTPUT": inputs["INPUT"] * 2}


@pytest.mark.parametrize("lengths", [(3, 4, 5), (6,)])
def test_a_tensor_backend_runs_one_ragged_batch(lengths: tuple[int, ...]) -> None:
    config = config_with(
        "BATCH_ACCUMULATED_ELEMENT_COUNT",
        extra='batch_output [ { target_name: "OUTPUT" kind: BATCH_SCATTER_WITH_INPUT_SHAPE\n'
        + '  source_input: "INPUT" } ]\n',
    )
    requests = [
        ModelRequest(id=str(i), inputs=r, requested_outputs=["OUTPUT"])
        for i, r in enumerate(rows(*lengths))
    ]
    ragged.add_batch_inputs(config, requests)
    model = Doubler(config)
    execution = model.execute(requests)
    assert model.seen["INPUT"].shape == (sum(lengths),)
    assert model.seen["INDEX"].tolist() == np.cumsum(lengths).tolist()
    for request, result in zip(requests, execution.results, strict=True):
        assert result.error is None
        assert np.array_equal(result.outputs["OUTPUT"], request.inputs["INPUT"] * 2)


def test_ragged_requests_share_a_shape_signature() -> None:
    config = parse_pbtxt(BASE, SOURCE)
    a = check_inputs(config, [tensors.from_numpy("INPUT", np.zeros((1, 3), np.float32))])
    b = check_inputs(config, [tensors.from_numpy("INPUT", np.zeros((1, 5), np.float32))])
    assert a[2] == b[2]
    plain = parse_pbtxt(BASE.replace(" allow_ragged_batch: true", ""), SOURCE)
    c = check_inputs(plain, [tensors.from_numpy("INPUT", np.zeros((1, 3), np.float32))])
    d = check_inputs(plain, [tensors.from_numpy("INPUT", np.zeros((1, 5), np.float32))])
    assert c[2] != d[2]


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (
            'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_FP16 '
            'source_input: "INPUT" } ]',
            "batch_input.data_type",
        ),
        (
            'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_INT32 '
            'source_input: "NOPE" } ]',
            "batch_input.source_input",
        ),
        (
            'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "INPUT" '
            'data_type: TYPE_INT32 source_input: "INPUT" } ]',
            "batch_input.target_name",
        ),
        (
            'batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "NOPE" '
            'source_input: "INPUT" } ]',
            "batch_output.target_name",
        ),
        (
            'batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "OUTPUT" } ]',
            "batch_output.source_input",
        ),
    ],
)
def test_what_cannot_be_computed_fails_the_load_naming_the_field(text: str, field: str) -> None:
    with pytest.raises(ConchError) as info:
        parse_pbtxt(BASE + text + "\n", SOURCE)
    assert f"field '{field}'" in info.value.message


def test_batch_inputs_need_a_batching_model() -> None:
    text = BASE.replace("max_batch_size: 8", "max_batch_size: 0")
    config_text = text.replace(" allow_ragged_batch: true", "")
    with pytest.raises(ConchError, match="field 'batch_input'"):
        parse_pbtxt(
            config_text
            + 'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_INT32 '
            + 'source_input: "INPUT" } ]\n',
            SOURCE,
        )


def test_the_order_gate_holds_later_batches_until_earlier_ones_leave() -> None:
    async def scenario() -> list[str]:
        gate, done = OrderGate(), []
        ordered = parse_pbtxt(BASE + "dynamic_batching { preserve_ordering: true }\n", SOURCE)
        assert gate.enter(ordered, b"5-0") and gate.enter(ordered, b"5-1")
        assert not gate.enter(parse_pbtxt(BASE, SOURCE), b"4-0")  # not ordered: never waited for

        async def publish(entry_id: bytes, name: str) -> None:
            await gate.turn(entry_id)
            done.append(name)
            gate.leave(entry_id)

        later = asyncio.create_task(publish(b"5-1", "second"))
        await asyncio.sleep(0)
        assert done == []  # the earlier batch still holds it
        await publish(b"5-0", "first")
        await later
        return done

    assert asyncio.run(scenario()) == ["first", "second"]


def test_a_warmup_batch_gets_its_batch_inputs_too(tmp_path: Path) -> None:
    config = config_with(
        "BATCH_ACCUMULATED_ELEMENT_COUNT",
        extra='model_warmup [ { name: "w" batch_size: 2 inputs { key: "INPUT" value: {\n'
        + "  data_type: TYPE_FP32 dims: [ 3 ] zero_data: true } } } ]\n",
    )
    [batch] = warmup_batches(config, tmp_path)
    assert [r.inputs["INDEX"].tolist() for r in batch] == [[3.0], [6.0]]


def test_batch_inputs_of_a_sequence_model_are_refused() -> None:
    text = (
        BASE
        + 'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_INT32 '
        + 'source_input: "INPUT" } ]\n'
        + "sequence_batching { }\n"
    )
    with pytest.raises(ConchError, match="field 'batch_input' is set on a sequence_batching"):
        parse_pbtxt(text, SOURCE)


def test_preserve_ordering_of_a_decoupled_model_is_refused() -> None:
    text = (
        BASE.replace(" allow_ragged_batch: true", "")
        + "dynamic_batching { preserve_ordering: true }\n"
        + "model_transaction_policy { decoupled: true }\n"
    )
    with pytest.raises(ConchError, match=r"field 'dynamic_batching\.preserve_ordering'"):
        parse_pbtxt(text, SOURCE)
    parse_pbtxt(text.replace("decoupled: true", "decoupled: false"), SOURCE)
