"""Which backends serve decoupled models: those that stream, and a clear refusal elsewhere."""

from __future__ import annotations

import pytest

from shared.model_config import ModelConfig, from_json
from shared.wire.errors import ConchError
from workers.backend_table import load_backend


def _config(backend: str, decoupled: bool) -> ModelConfig:
    return from_json(
        {
            "name": "streamer",
            "backend": backend,
            "max_batch_size": 0,
            "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [1]}],
            "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [1]}],
            "model_transaction_policy": {"decoupled": decoupled},
        }
    )


def test_a_backend_that_cannot_stream_refuses_a_decoupled_model_at_load() -> None:
    backend = load_backend("onnxruntime")
    with pytest.raises(ConchError, match="backend 'onnxruntime' does not serve decoupled") as e:
        backend.check_decoupled(_config("onnxruntime", True))
    assert "python and the Python-based backends" in e.value.message
    backend.check_decoupled(_config("onnxruntime", False))


def test_the_python_backend_streams() -> None:
    backend = load_backend("python")
    assert backend.streams
    backend.check_decoupled(_config("python", True))
