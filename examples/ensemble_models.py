"""The ensembles of the example repository and the ONNX models they compose; ``make_models.py``
writes them.

- ``mlp_ensemble``: ``ens_preprocess`` (INPUT * 0.5) feeds two branches that run in parallel,
  ``mlp`` and ``ens_summary`` (the sums of 16 blocks of 16 values), whose outputs
  ``add_sub`` (the postprocess step) adds and subtracts: SCORES = mlp(x/2) + summary(x/2),
  DELTA = mlp(x/2) - summary(x/2). Its composing models ``ens_preprocess`` and ``ens_summary``
  have two priority levels, so a priority-1 ensemble request overtakes priority-2 work at every
  step.
- ``add_sub_chain``: three ``add_sub`` steps one after another (the benchmark's ensemble: the
  cost of a step is the mesh's, the model is next to free).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
PRODUCER = "conch/examples/make_models.py"

_BATCHING = """dynamic_batching {
  max_queue_delay_microseconds: 500
  priority_levels: 2
  default_priority_level: 2
}
"""


@dataclass(frozen=True)
class OnnxExample:
    name: str
    onnx_model: onnx.ModelProto
    config: str

    def config_pbtxt(self) -> str:
        return self.config


@dataclass(frozen=True)
class EnsembleExample:
    """An ensemble: a config.pbtxt and an empty version directory, no model file."""

    name: str
    config: str
    onnx_model: None = None

    def config_pbtxt(self) -> str:
        return self.config


def _fp32(name: str, width: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", width])


def _onnx(
    name: str,
    nodes: list[onnx.NodeProto],
    widths: tuple[int, int],
    initializers: list[onnx.TensorProto],
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        name,
        [_fp32("INPUT0", widths[0])],
        [_fp32("OUTPUT0", widths[1])],
        initializers,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name=PRODUCER
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def _config(name: str, widths: tuple[int, int]) -> str:
    return (
        f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 64\n'
        f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {widths[0]} ] }} ]\n'
        f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {widths[1]} ] }} ]\n' + _BATCHING
    )


def summary_matrix() -> np.ndarray:
    """[256, 16]: column j sums inputs 16j .. 16j+15."""
    return np.kron(np.eye(16, dtype=np.float32), np.ones((16, 1), dtype=np.float32))


def build_preprocess() -> OnnxExample:
    half = numpy_helper.from_array(np.array(0.5, dtype=np.float32), "HALF")
    nodes = [helper.make_node("Mul", ["INPUT0", "HALF"], ["OUTPUT0"])]
    model = _onnx("ens_preprocess", nodes, (256, 256), [half])
    return OnnxExample("ens_preprocess", model, _config("ens_preprocess", (256, 256)))


def build_summary() -> OnnxExample:
    matrix = numpy_helper.from_array(summary_matrix(), "BLOCKS")
    nodes = [helper.make_node("MatMul", ["INPUT0", "BLOCKS"], ["OUTPUT0"])]
    model = _onnx("ens_summary", nodes, (256, 16), [matrix])
    return OnnxExample("ens_summary", model, _config("ens_summary", (256, 16)))


def _step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    maps = "".join(f'      input_map {{ key: "{k}" value: "{v}" }}\n' for k, v in inputs.items())
    maps += "".join(f'      output_map {{ key: "{k}" value: "{v}" }}\n' for k, v in outputs.items())
    return f'    {{\n      model_name: "{model}"\n      model_version: -1\n{maps}    }}'


def _ensemble(name: str, inputs: str, outputs: str, steps: list[str]) -> EnsembleExample:
    config = (
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 64\n'
        f"input [ {inputs} ]\noutput [ {outputs} ]\n"
        "ensemble_scheduling {\n  step [\n" + ",\n".join(steps) + "\n  ]\n}\n"
    )
    return EnsembleExample(name, config)


def build_mlp_ensemble() -> EnsembleExample:
    return _ensemble(
        "mlp_ensemble",
        '{ name: "INPUT" data_type: TYPE_FP32 dims: [ 256 ] }',
        '{ name: "SCORES" data_type: TYPE_FP32 dims: [ 16 ] }, '
        '{ name: "DELTA" data_type: TYPE_FP32 dims: [ 16 ] }',
        [
            _step("ens_preprocess", {"INPUT0": "INPUT"}, {"OUTPUT0": "scaled"}),
            _step("mlp", {"INPUT0": "scaled"}, {"OUTPUT0": "logits"}),
            _step("ens_summary", {"INPUT0": "scaled"}, {"OUTPUT0": "blocks"}),
            _step(
                "add_sub",
                {"INPUT0": "logits", "INPUT1": "blocks"},
                {"OUTPUT0": "SCORES", "OUTPUT1": "DELTA"},
            ),
        ],
    )


def build_add_sub_chain(steps: int = 3, name: str = "add_sub_chain") -> EnsembleExample:
    """``steps`` add_sub steps one after another: each step's sum and difference are the next
    step's inputs (3 steps: OUTPUT0 = 2 * (INPUT0 + INPUT1), OUTPUT1 = 2 * (INPUT0 - INPUT1))."""
    chain = []
    for i in range(steps):
        first, last = i == 0, i == steps - 1
        inputs = {"INPUT0": "INPUT0", "INPUT1": "INPUT1"}
        if not first:
            inputs = {"INPUT0": f"sum{i}", "INPUT1": f"diff{i}"}
        outputs = {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"}
        if not last:
            outputs = {"OUTPUT0": f"sum{i + 1}", "OUTPUT1": f"diff{i + 1}"}
        chain.append(_step("add_sub", inputs, outputs))
    pair = ("INPUT0", "INPUT1"), ("OUTPUT0", "OUTPUT1")
    tensors, outputs_text = (
        ", ".join(f'{{ name: "{n}" data_type: TYPE_FP32 dims: [ 16 ] }}' for n in names)
        for names in pair
    )
    return _ensemble(name, tensors, outputs_text, chain)


BUILDERS: dict[str, Callable[[], OnnxExample | EnsembleExample]] = {
    "ens_preprocess": build_preprocess,
    "ens_summary": build_summary,
    "mlp_ensemble": build_mlp_ensemble,
    "add_sub_chain": build_add_sub_chain,
}
