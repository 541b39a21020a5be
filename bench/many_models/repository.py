"""A model repository of many small ONNX models: the same MLP graph, distinct weights each.

    m0000 ... m0999 / config.pbtxt, 1/model.onnx

Every model has its own weights (drawn from ``[SEED, index]``), so no two files are equal and a
server cannot share one load between models. The graph is built once and only its initializers'
bytes change per model, which is what makes 1,000 models take seconds: building each graph with
``onnx.helper`` would cost more than drawing its weights. IR version 8 / opset 17, as
examples/make_models.py writes its models, loadable by any onnxruntime >= 1.13.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx

from bench.models import mlp

SEED = 20261128
DIMS = (64, 256, 256, 16)  # 86,016 FP32 weights: 344 KB per model file
MAX_BATCH_SIZE = 32
INPUT, OUTPUT = "INPUT0", "OUTPUT0"


def model_name(index: int) -> str:
    """The name of the model at 0-based popularity rank ``index`` (rank 1 is ``m0000``)."""
    return f"m{index:04d}"


def config_pbtxt(name: str, queue_delay_us: int) -> str:
    """A batching CPU model with one instance (a thousand models: one ONNX session each)."""
    return (
        f'name: "{name}"\n'
        'platform: "onnxruntime_onnx"\n'
        f"max_batch_size: {MAX_BATCH_SIZE}\n"
        f'input [ {{ name: "{INPUT}" data_type: TYPE_FP32 dims: [ {DIMS[0]} ] }} ]\n'
        f'output [ {{ name: "{OUTPUT}" data_type: TYPE_FP32 dims: [ {DIMS[-1]} ] }} ]\n'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
        f"dynamic_batching {{ max_queue_delay_microseconds: {queue_delay_us} }}\n"
    )


def _template() -> onnx.ModelProto:
    """The MLP (MatMul + Relu layers) with zero weights."""
    zeros = [np.zeros((n_in, n_out), np.float32) for n_in, n_out in itertools.pairwise(DIMS)]
    model: onnx.ModelProto = mlp("many_models_mlp", zeros, "conch/bench/many_models")
    return model


def weights(index: int) -> list[npt.NDArray[np.float32]]:
    """Model ``index``'s weight matrices (scaled so activations stay near unit variance)."""
    rng = np.random.default_rng([SEED, index])
    return [
        (rng.standard_normal((n_in, n_out), dtype=np.float32) / np.float32(np.sqrt(n_in)))
        for n_in, n_out in itertools.pairwise(DIMS)
    ]


def write(repo: Path, count: int, queue_delay_us: int = 0) -> int:
    """Write models 0..count-1 into ``repo`` (models already there with the same config are
    kept: a second run costs nothing); the number written."""
    model = _template()
    written = 0
    for index in range(count):
        name = model_name(index)
        config = config_pbtxt(name, queue_delay_us)
        target = repo / name / "1" / "model.onnx"
        config_path = repo / name / "config.pbtxt"
        if target.exists() and config_path.exists() and config_path.read_text() == config:
            continue
        for init, array in zip(model.graph.initializer, weights(index), strict=True):
            init.raw_data = array.tobytes()
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(model.SerializeToString())
        config_path.write_text(config)
        written += 1
    return written
