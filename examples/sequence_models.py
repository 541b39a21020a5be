"""The ONNX sequence (stateful) models of the example repository; ``make_models.py`` writes them.

- ``simple_sequence`` and ``simple_dyna_sequence`` have the names, signatures, configs and
  arithmetic of Triton's own example models of those names (docs/examples/model_repository), so
  NVIDIA's client examples (``simple_{http,grpc}_sequence_sync_infer_client.py``, ``-d`` for the
  dyna one) run against Conch unchanged: OUTPUT = (INPUT + START) * READY, and for the dyna model
  (INPUT + START + END * CORRID) * READY. They hold no state: what they show is that the sequence
  batcher feeds the control inputs right.
- ``sequence_accumulator`` is the stateful one: OUTPUT is the running sum of INPUT over the
  sequence, kept in Triton's implicit state (``INPUT_STATE`` -> ``OUTPUT_STATE``), which Conch
  commits to Redis after every step, so a sequence carries on after its worker dies.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx
from onnx import TensorProto, helper

OPSET = 17
IR_VERSION = 8
PRODUCER = "conch/examples/make_models.py"

_INT32_ONE = helper.make_tensor("ONE", TensorProto.INT32, [], [1])


@dataclass(frozen=True)
class SequenceExample:
    name: str
    onnx_model: onnx.ModelProto
    config: str

    def config_pbtxt(self) -> str:
        return self.config


def _io(name: str, elem: int = TensorProto.INT32) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, ["batch", 1])


def _model(
    name: str,
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    initializers: list[onnx.TensorProto] | None = None,
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializers or [])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name=PRODUCER
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def _control(name: str, kind: str) -> str:
    return f'    {{ name: "{name}" control [ {{ kind: {kind} int32_false_true: [ 0, 1 ] }} ] }}'


_IO = """input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


def build_simple_sequence() -> SequenceExample:
    nodes = [
        helper.make_node("Add", ["INPUT", "START"], ["SUM"]),
        helper.make_node("Mul", ["READY", "SUM"], ["OUTPUT"]),
    ]
    graph = _model(
        "simple_sequence",
        nodes,
        [_io("INPUT"), _io("START"), _io("READY")],
        [_io("OUTPUT")],
    )
    config = (
        'name: "simple_sequence"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        "sequence_batching {\n  control_input [\n"
        + _control("START", "CONTROL_SEQUENCE_START")
        + ",\n"
        + _control("READY", "CONTROL_SEQUENCE_READY")
        + "\n  ]\n}\n"
        + _IO
        + "instance_group [ { kind: KIND_CPU } ]\n"
    )
    return SequenceExample("simple_sequence", graph, config)


def build_simple_dyna_sequence() -> SequenceExample:
    nodes = [
        helper.make_node("Cast", ["CORRID"], ["CORRID_INT32"], to=TensorProto.INT32),
        helper.make_node("Add", ["INPUT", "START"], ["STARTED"]),
        helper.make_node("Mul", ["END", "CORRID_INT32"], ["ENDED"]),
        helper.make_node("Add", ["STARTED", "ENDED"], ["SUM"]),
        helper.make_node("Mul", ["READY", "SUM"], ["OUTPUT"]),
    ]
    graph = _model(
        "simple_dyna_sequence",
        nodes,
        [_io("INPUT"), _io("START"), _io("END"), _io("READY"), _io("CORRID", TensorProto.UINT64)],
        [_io("OUTPUT")],
    )
    config = (
        'name: "simple_dyna_sequence"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        "sequence_batching {\n"
        "  max_sequence_idle_microseconds: 10000000\n"
        "  oldest { max_candidate_sequences: 1024 max_queue_delay_microseconds: 10000 }\n"
        "  control_input [\n"
        + _control("START", "CONTROL_SEQUENCE_START")
        + ",\n"
        + _control("END", "CONTROL_SEQUENCE_END")
        + ",\n"
        + _control("READY", "CONTROL_SEQUENCE_READY")
        + ",\n"
        + '    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID '
        + "data_type: TYPE_UINT64 } ] }"
        + "\n  ]\n}\n"
        + _IO
        + 'parameters [ { key: "execute_delay_ms" value: { string_value: "3" } } ]\n'
        + "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
    )
    return SequenceExample("simple_dyna_sequence", graph, config)


ACCUMULATOR_CONFIG = """\
name: "sequence_accumulator"
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {
  max_sequence_idle_microseconds: 10000000
  direct { }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
  state [
    { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ] }
  ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


def build_sequence_accumulator() -> SequenceExample:
    """OUTPUT = INPUT + (START ? 0 : INPUT_STATE); the state follows OUTPUT while READY."""
    nodes = [
        helper.make_node("Sub", ["ONE", "START"], ["KEEP"]),
        helper.make_node("Mul", ["INPUT_STATE", "KEEP"], ["PREVIOUS"]),
        helper.make_node("Add", ["INPUT", "PREVIOUS"], ["OUTPUT"]),
        helper.make_node("Sub", ["ONE", "READY"], ["IDLE"]),
        helper.make_node("Mul", ["READY", "OUTPUT"], ["NEW_STATE"]),
        helper.make_node("Mul", ["IDLE", "INPUT_STATE"], ["OLD_STATE"]),
        helper.make_node("Add", ["NEW_STATE", "OLD_STATE"], ["OUTPUT_STATE"]),
    ]
    graph = _model(
        "sequence_accumulator",
        nodes,
        [_io("INPUT"), _io("START"), _io("READY"), _io("INPUT_STATE")],
        [_io("OUTPUT"), _io("OUTPUT_STATE")],
        [_INT32_ONE],
    )
    return SequenceExample("sequence_accumulator", graph, ACCUMULATOR_CONFIG)


BUILDERS = {
    "simple_sequence": build_simple_sequence,
    "simple_dyna_sequence": build_simple_dyna_sequence,
    "sequence_accumulator": build_sequence_accumulator,
}
