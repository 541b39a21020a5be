"""The config.pbtxt of each example Python model (``examples/python_models/<name>/model.py``)."""

from __future__ import annotations

PROBE_CONFIG = """\
name: "python_probe"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT64 dims: [ 1 ] } ]
output [
  { name: "OUTPUT0" data_type: TYPE_INT64 dims: [ 1 ] },
  { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] }
]
dynamic_batching { max_queue_delay_microseconds: 500 }
instance_group [ { kind: KIND_CPU count: 2 } ]
"""

# Triton's implicit state in a Python model: the running sum survives the model's worker.
ACCUMULATOR_PY_CONFIG = """\
name: "sequence_accumulator_py"
backend: "python"
max_batch_size: 8
sequence_batching {
  max_sequence_idle_microseconds: 10000000
  oldest { max_candidate_sequences: 16 }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
  state [ {
    input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ]
    initial_state: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zero" }
  } ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "CORRID_SEEN" data_type: TYPE_STRING dims: [ 1 ] }
]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

# NVIDIA's client examples (-d) use this name: simple_dyna_sequence's config, a string CORRID.
STRING_DYNA_CONFIG = """\
name: "simple_string_dyna_sequence"
backend: "python"
max_batch_size: 8
sequence_batching {
  max_sequence_idle_microseconds: 10000000
  oldest { max_candidate_sequences: 1024 max_queue_delay_microseconds: 10000 }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] }
  ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""


# Models of the names and signatures NVIDIA's client examples (triton-inference-server/client,
# src/python/examples) use, as Python models.
SIMPLE_STRING_CONFIG = """\
name: "simple_string"
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_STRING dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_STRING dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_STRING dims: [ 16 ] }
]
dynamic_batching { max_queue_delay_microseconds: 1000 }
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

# Inputs, outputs and the batch size come from the model's auto_complete_config.
SIMPLE_IDENTITY_CONFIG = """\
name: "simple_identity"
backend: "python"
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

# Decoupled: one request, a stream of responses (gRPC ModelStreamInfer, /generate_stream, SSE).
REPEAT_INT32_CONFIG = """\
name: "repeat_int32"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] },
  { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] }
]
output [
  { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] }
]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

# A decoupled model that streams repeat_int32's responses through decoupled BLS.
BLS_REPEAT_CONFIG = """\
name: "bls_repeat"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] }
]
output [
  { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] }
]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

# Triton's decoupled square example: IN = n -> n responses OUT = [n], then the final flag.
SQUARE_INT32_CONFIG = """\
name: "square_int32"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

# The chaos suite's model (tests/chaos/): answers 3 * ID + 1 and records every execution by ID.
# Three priority levels (the default, 2, for requests that name none) for the soak's mix.
RECORDER_CONFIG = """\
name: "chaos_recorder"
backend: "python"
max_batch_size: 8
input [ { name: "ID" data_type: TYPE_INT64 dims: [ 1 ] } ]
output [
  { name: "OUTPUT0" data_type: TYPE_INT64 dims: [ 1 ] },
  { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] }
]
dynamic_batching {
  max_queue_delay_microseconds: 1000
  priority_levels: 3
  default_priority_level: 2
}
instance_group [ { kind: KIND_CPU count: 2 } ]
"""

# BLS: calls add_sub and the add_sub_chain ensemble (examples/python_models/bls_pipeline).
BLS_PIPELINE_CONFIG = """\
name: "bls_pipeline"
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "READY" data_type: TYPE_INT32 dims: [ 2 ] }
]
dynamic_batching { max_queue_delay_microseconds: 500 }
instance_group [ { kind: KIND_CPU count: 2 } ]
"""
