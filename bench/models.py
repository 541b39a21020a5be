"""Extra benchmark models: a memory-bound MLP, with dynamic batching and without.

Its 72 MB of weights are far larger than the CPU caches, so one execution costs about the same
at batch 1 as at batch 64: the throughput that batching buys is the point of the cell.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np

SEED = 20261122
DIMS = (256, 8192, 2048, 16)
NAMES = ("membound", "membound_nobatch")


def mlp(name: str, weights: list[Any], producer: str = "") -> Any:
    """An ONNX MLP over ``weights`` (MatMul, Relu between layers): INPUT0 [batch, in] ->
    OUTPUT0 [batch, out], IR 8 / opset 17 as examples/make_models.py writes its models."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits, x = [], [], "INPUT0"
    for i, w in enumerate(weights):
        inits.append(numpy_helper.from_array(np.asarray(w, np.float32), f"W{i}"))
        last = i == len(weights) - 1
        out = "OUTPUT0" if last else f"M{i}"
        nodes.append(helper.make_node("MatMul", [x, f"W{i}"], [out]))
        if not last:
            nodes.append(helper.make_node("Relu", [out], [f"H{i}"]))
            x = f"H{i}"
    first, final = weights[0].shape[0], weights[-1].shape[1]
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", first])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", final])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name=producer
    )
    model.ir_version = 8
    return model


def _graph() -> tuple[Any, Any]:  # (the onnx module, imported here: optional; its model)
    import onnx

    rng = np.random.default_rng(SEED)
    weights = [
        (rng.standard_normal((n_in, n_out), dtype=np.float32) / np.sqrt(n_in)).astype(np.float32)
        for n_in, n_out in itertools.pairwise(DIMS)
    ]
    return onnx, mlp("membound", weights)


def write(repo: Path) -> None:
    onnx: Any = None
    model: Any = None
    for name in NAMES:
        target = repo / name / "1" / "model.onnx"
        if target.exists():
            continue
        if model is None:
            onnx, model = _graph()
        target.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(model, target)
        batching = (
            "dynamic_batching { max_queue_delay_microseconds: 2000 }\n"
            if name == "membound"
            else ""
        )
        (repo / name / "config.pbtxt").write_text(
            f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 64\n'
            f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {DIMS[0]} ] }} ]\n'
            f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {DIMS[-1]} ] }} ]\n'
            + batching
        )
