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


def _graph() -> tuple[Any, Any]:  # (the onnx module, imported here: optional; its model)
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(SEED)
    nodes, inits, x = [], [], "INPUT0"
    for i, (n_in, n_out) in enumerate(itertools.pairwise(DIMS)):
        w = (rng.standard_normal((n_in, n_out), dtype=np.float32) / np.sqrt(n_in)).astype(
            np.float32
        )
        inits.append(numpy_helper.from_array(w, f"W{i}"))
        last = i == len(DIMS) - 2
        out = "OUTPUT0" if last else f"M{i}"
        nodes.append(helper.make_node("MatMul", [x, f"W{i}"], [out]))
        if not last:
            nodes.append(helper.make_node("Relu", [out], [f"H{i}"]))
            x = f"H{i}"
    graph = helper.make_graph(
        nodes,
        "membound",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", DIMS[0]])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", DIMS[-1]])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx, model


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
