"""``bench.backends``: the in-process inputs follow the configuration, and the batch size the
mesh formed is read from the statistics' counts."""

from __future__ import annotations

import pytest

from bench.backends import BytesInput, _batch_formed, _inputs
from shared.model_config import ModelConfig, from_json


def _config(max_batch_size: int, data_type: str = "TYPE_FP32") -> ModelConfig:
    return from_json(
        {
            "name": "m",
            "backend": "onnxruntime",
            "max_batch_size": max_batch_size,
            "input": [{"name": "X", "data_type": data_type, "dims": [-1, 3]}],
            "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [1]}],
        }
    )


def test_inputs_take_the_batch_only_when_the_model_batches() -> None:
    batched = _inputs(_config(8), 4)
    assert batched["X"].shape == (4, 1, 3) and batched["X"].dtype.name == "float32"
    assert _inputs(_config(0), 4)["X"].shape == (1, 3)


def test_bytes_inputs_are_left_to_the_mesh() -> None:
    with pytest.raises(BytesInput, match="BYTES"):
        _inputs(_config(8, "TYPE_STRING"), 1)


def test_batch_formed_is_rows_per_execution_over_the_run() -> None:
    before = {"execution_count": 10, "inference_count": 10}
    assert _batch_formed(before, {"execution_count": 20, "inference_count": 130}) == 12.0
    assert _batch_formed(before, before) == 0.0
