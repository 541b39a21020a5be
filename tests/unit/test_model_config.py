"""``config.pbtxt`` parsing: Triton's names and defaults, the JSON form, and precise errors.

A Triton user's existing configs must load unchanged and mean what they mean in Triton, and a
broken one must say where (file:line:col) and which field, because that message is all an
operator sees when a model fails to load.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shared.model_config import (
    QueuePolicy,
    VersionPolicy,
    from_json,
    load,
    parse_pbtxt,
)
from shared.wire.errors import ConchError, ErrorCode

SOURCE = "models/m/config.pbtxt"
MINIMAL = 'name: "m"\nplatform: "onnxruntime_onnx"\n'

# A production-style config touching most of Triton's schema.
RESNET = """\
# ResNet-50 on ONNX Runtime with TensorRT acceleration.
name: "resnet50"
platform: "onnxruntime_onnx"
max_batch_size: 32
version_policy: { specific: { versions: [1, 3] } }
input [
  {
    name: "input"
    data_type: TYPE_FP32
    format: FORMAT_NCHW
    dims: [ 3, 224, 224 ]
  }
]
output [
  {
    name: "probs"
    data_type: TYPE_FP32
    dims: [ 1000 ]
    label_filename: "labels.txt"
  },
  {
    name: "features"
    data_type: TYPE_FP16
    dims: [ -1 ]
    reshape: { shape: [ -1, 1 ] }
  }
]
instance_group [
  { count: 2, kind: KIND_GPU, gpus: [ 0 ] },
  { count: 1, kind: KIND_CPU }
]
dynamic_batching {
  preferred_batch_size: [ 8, 16 ]
  max_queue_delay_microseconds: 100
  priority_levels: 3
  default_priority_level: 2
  default_queue_policy {
    timeout_action: DELAY
    default_timeout_microseconds: 5000000000
    allow_timeout_override: true
    max_queue_size: 64
  }
  priority_queue_policy {
    key: 1
    value { timeout_action: REJECT default_timeout_microseconds: 1000 max_queue_size: 8 }
  }
}
optimization {
  execution_accelerators {
    gpu_execution_accelerator : [ {
      name : "tensorrt"
      parameters { key: "precision_mode" value: "FP16" }
      parameters { key: "max_workspace_size_bytes" value: "1073741824" }
    } ]
  }
}
parameters { key: "intra_op_thread_count" value: { string_value: "4" } }
parameters [ { key: "cudnn_conv_algo_search" value: { string_value: "HEURISTIC" } } ]
model_warmup [
  {
    name: "zero_batch"
    batch_size: 8
    inputs {
      key: "input"
      value: { data_type: TYPE_FP32 dims: [ 3, 224, 224 ] zero_data: true }
    }
  }
]
"""

ENSEMBLE = """\
name: "pipeline"
platform: "ensemble"
max_batch_size: 8
input [ { name: "RAW" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "SCORES" data_type: TYPE_FP32 dims: [ 1000 ] } ]
ensemble_scheduling {
  step [
    {
      model_name: "preprocess"
      model_version: -1
      input_map { key: "INPUT" value: "RAW" }
      output_map { key: "OUTPUT" value: "image" }
    },
    {
      model_name: "resnet50"
      model_version: 3
      input_map { key: "input" value: "image" }
      output_map { key: "probs" value: "SCORES" }
    }
  ]
}
"""

SEQUENCE = """\
name: "stateful"
backend: "onnxruntime"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
  oldest { max_candidate_sequences: 4 preferred_batch_size: [ 2 ] }
}
"""


def parse_error(text: str, source: str = SOURCE) -> str:
    """The message of the INVALID_ARG error that parsing ``text`` must raise."""
    with pytest.raises(ConchError) as info:
        parse_pbtxt(text, source)
    assert info.value.code is ErrorCode.INVALID_ARG
    return info.value.message


def write_model_dir(root: Path, dirname: str, text: str) -> Path:
    model_dir = root / dirname
    model_dir.mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(text, encoding="utf-8")
    return model_dir


# --- defaults -------------------------------------------------------------------------------


def test_minimal_config_gets_tritons_defaults() -> None:
    config = parse_pbtxt(MINIMAL, SOURCE)
    assert config.name == "m"
    assert config.backend == "onnxruntime"
    assert config.max_batch_size == 0
    assert config.version_policy == VersionPolicy(kind="latest", num_versions=1)
    assert config.json["version_policy"] == {"latest": {"num_versions": 1}}
    [group] = config.instance_groups
    assert (group.kind, group.count, group.gpus) == ("KIND_AUTO", 1, [])
    assert config.instance_count == 1
    assert config.dynamic_batching is None
    assert config.sequence_batching is None
    assert config.ensemble_scheduling is None
    assert config.optimization is None
    assert config.model_warmup == []
    assert config.parameters == {}
    assert config.model_filename == "model.onnx"
    assert config.priority_levels() == [1]
    assert config.default_priority() == 1


@pytest.mark.parametrize(
    ("header", "platform", "backend", "filename"),
    [
        ('platform: "onnxruntime_onnx"', "onnxruntime_onnx", "onnxruntime", "model.onnx"),
        ('platform: "pytorch_libtorch"', "pytorch_libtorch", "pytorch", "model.pt"),
        ('platform: "tensorrt_plan"', "tensorrt_plan", "tensorrt", "model.plan"),
        ('backend: "onnxruntime"', "onnxruntime_onnx", "onnxruntime", "model.onnx"),
        ('backend: "pytorch"', "pytorch_libtorch", "pytorch", "model.pt"),
        ('backend: "python"', "", "python", "model.py"),
    ],
)
def test_platform_and_backend_complete_each_other(
    header: str, platform: str, backend: str, filename: str
) -> None:
    config = parse_pbtxt(f'name: "m"\n{header}\n', SOURCE)
    assert (config.platform, config.backend, config.model_filename) == (
        platform,
        backend,
        filename,
    )


def test_default_model_filename_overrides_the_backend_default() -> None:
    config = parse_pbtxt(MINIMAL + 'default_model_filename: "resnet.onnx"\n', SOURCE)
    assert config.model_filename == "resnet.onnx"


def test_instance_group_count_zero_means_one_and_groups_are_named() -> None:
    config = parse_pbtxt(
        MINIMAL + "instance_group [ { kind: KIND_CPU }, { name: 'fast' count: 3 } ]\n", SOURCE
    )
    assert [(g.name, g.kind, g.count) for g in config.instance_groups] == [
        ("m_0", "KIND_CPU", 1),
        ("fast", "KIND_AUTO", 3),
    ]
    assert config.instance_count == 4


def test_name_defaults_to_the_given_default_name() -> None:
    config = parse_pbtxt('platform: "onnxruntime_onnx"\n', SOURCE, default_name="dirname")
    assert config.name == "dirname"


@pytest.mark.parametrize(
    ("config_type", "v2_name"),
    [
        ("TYPE_BOOL", "BOOL"),
        ("TYPE_UINT8", "UINT8"),
        ("TYPE_UINT16", "UINT16"),
        ("TYPE_UINT32", "UINT32"),
        ("TYPE_UINT64", "UINT64"),
        ("TYPE_INT8", "INT8"),
        ("TYPE_INT16", "INT16"),
        ("TYPE_INT32", "INT32"),
        ("TYPE_INT64", "INT64"),
        ("TYPE_FP16", "FP16"),
        ("TYPE_FP32", "FP32"),
        ("TYPE_FP64", "FP64"),
        ("TYPE_BF16", "BF16"),
        ("TYPE_STRING", "BYTES"),
    ],
)
def test_config_datatypes_map_to_v2_names(config_type: str, v2_name: str) -> None:
    text = MINIMAL + f'input [ {{ name: "x" data_type: {config_type} dims: [ 2, -1 ] }} ]\n'
    [spec] = parse_pbtxt(text, SOURCE).inputs
    assert (spec.name, spec.datatype, spec.dims) == ("x", v2_name, [2, -1])


def test_io_flags_and_lookup_helpers() -> None:
    config = parse_pbtxt(
        MINIMAL
        + "max_batch_size: 4\n"
        + 'input [ { name: "A" data_type: TYPE_INT64 dims: [ 1 ] },\n'
        + '        { name: "B" data_type: TYPE_FP32 dims: [ -1 ] optional: true\n'
        + "          allow_ragged_batch: true } ]\n"
        + 'output [ { name: "C" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape { shape: [ 4 ] } } ]\n',
        SOURCE,
    )
    assert config.input_names == ["A", "B"]
    assert config.output_names == ["C"]
    a, b = config.input("A"), config.input("B")
    assert a is not None and not a.is_shape_tensor and not a.optional
    assert b is not None and b.optional and b.allow_ragged_batch
    c = config.output("C")
    assert c is not None and c.reshape == [4] and c.dims == [2, 2]
    assert config.input("C") is None
    assert config.output("A") is None


# --- a realistic Triton config ----------------------------------------------------------------


def test_realistic_resnet_config_loads_every_section() -> None:
    config = parse_pbtxt(RESNET, "models/resnet50/config.pbtxt")
    assert (config.name, config.backend, config.max_batch_size) == ("resnet50", "onnxruntime", 32)

    assert config.version_policy == VersionPolicy(kind="specific", versions=[1, 3])
    assert config.version_policy.select([1, 2, 3, 4]) == [1, 3]

    gpu, cpu = config.instance_groups
    assert (gpu.name, gpu.kind, gpu.count, gpu.gpus) == ("resnet50_0", "KIND_GPU", 2, [0])
    assert (cpu.name, cpu.kind, cpu.count, cpu.gpus) == ("resnet50_1", "KIND_CPU", 1, [])
    assert config.instance_count == 3

    [inp] = config.inputs
    assert (inp.datatype, inp.dims) == ("FP32", [3, 224, 224])
    probs, features = config.outputs
    assert (probs.name, probs.dims, probs.reshape) == ("probs", [1000], None)
    assert (features.datatype, features.dims, features.reshape) == ("FP16", [-1], [-1, 1])

    batching = config.dynamic_batching
    assert batching is not None
    assert batching.preferred_batch_size == [8, 16]
    assert batching.max_queue_delay_microseconds == 100
    assert (batching.priority_levels, batching.default_priority_level) == (3, 2)
    assert batching.default_queue_policy == QueuePolicy(
        timeout_action="DELAY",
        default_timeout_microseconds=5_000_000_000,
        allow_timeout_override=True,
        max_queue_size=64,
    )
    assert batching.priority_queue_policy == {
        1: QueuePolicy(timeout_action="REJECT", default_timeout_microseconds=1000, max_queue_size=8)
    }
    # Level 1 has its own policy; the other levels fall back to the default one.
    assert batching.queue_policy(1).max_queue_size == 8
    assert batching.queue_policy(2) == batching.default_queue_policy
    assert batching.queue_policy(3).timeout_action == "DELAY"
    assert config.priority_levels() == [1, 2, 3]
    assert config.default_priority() == 2

    assert config.parameters == {
        "intra_op_thread_count": "4",
        "cudnn_conv_algo_search": "HEURISTIC",
    }
    assert config.optimization is not None
    [accelerator] = config.optimization["execution_accelerators"]["gpu_execution_accelerator"]
    assert accelerator == {
        "name": "tensorrt",
        "parameters": {"precision_mode": "FP16", "max_workspace_size_bytes": "1073741824"},
    }
    [warmup] = config.model_warmup
    assert warmup["name"] == "zero_batch"
    assert warmup["batch_size"] == 8
    assert warmup["inputs"]["input"] == {
        "data_type": "TYPE_FP32",
        "dims": [3, 224, 224],
        "zero_data": True,
    }


def test_json_form_uses_proto_names_and_64_bit_integers_as_numbers() -> None:
    """Triton's /config prints int64/uint64 as JSON numbers, not protobuf-JSON strings."""
    data = parse_pbtxt(RESNET, SOURCE).to_json()
    assert data["max_batch_size"] == 32
    assert data["version_policy"] == {"specific": {"versions": [1, 3]}}
    assert data["input"][0]["dims"] == [3, 224, 224]
    assert data["input"][0]["format"] == "FORMAT_NCHW"
    assert data["output"][0]["label_filename"] == "labels.txt"
    assert data["output"][1]["reshape"] == {"shape": [-1, 1]}
    assert data["instance_group"][0]["kind"] == "KIND_GPU"
    batching = data["dynamic_batching"]
    assert batching["max_queue_delay_microseconds"] == 100
    assert batching["default_queue_policy"]["default_timeout_microseconds"] == 5_000_000_000
    assert batching["default_queue_policy"]["timeout_action"] == "DELAY"
    assert batching["priority_queue_policy"]["1"]["default_timeout_microseconds"] == 1000
    assert batching["priority_queue_policy"]["1"]["max_queue_size"] == 8
    assert data["model_warmup"][0]["inputs"]["input"]["dims"] == [3, 224, 224]
    assert data["parameters"]["intra_op_thread_count"] == {"string_value": "4"}
    text = json.dumps(data)
    assert '"5000000000"' not in text
    assert '"224"' not in text


@pytest.mark.parametrize("text", [RESNET, ENSEMBLE, SEQUENCE, MINIMAL])
def test_json_form_round_trips_through_from_json(text: str) -> None:
    """Registry entries are stored as JSON; reading one back must give the same config."""
    config = parse_pbtxt(text, SOURCE)
    again = from_json(json.loads(json.dumps(config.to_json())))
    assert again == config
    assert again.to_json() == config.to_json()


def test_ensemble_config_loads_steps_and_has_no_instances() -> None:
    config = parse_pbtxt(ENSEMBLE, "models/pipeline/config.pbtxt")
    assert (config.platform, config.backend) == ("ensemble", "ensemble")
    assert config.instance_groups == []
    assert config.instance_count == 1
    assert config.model_filename == ""
    assert config.inputs[0].datatype == "BYTES"
    assert config.ensemble_scheduling is not None
    first, second = config.ensemble_scheduling["step"]
    assert first["model_name"] == "preprocess"
    assert first["model_version"] == -1
    assert first["input_map"] == {"INPUT": "RAW"}
    assert first["output_map"] == {"OUTPUT": "image"}
    assert (second["model_name"], second["model_version"]) == ("resnet50", 3)
    assert second["output_map"] == {"probs": "SCORES"}


def test_sequence_batching_is_parsed_in_json_form() -> None:
    config = parse_pbtxt(SEQUENCE, SOURCE)
    assert config.dynamic_batching is None
    sequence = config.sequence_batching
    assert sequence is not None
    assert sequence["max_sequence_idle_microseconds"] == 5_000_000
    start, corrid = sequence["control_input"]
    assert start["name"] == "START"
    assert start["control"][0]["kind"] == "CONTROL_SEQUENCE_START"
    assert start["control"][0]["fp32_false_true"] == [0.0, 1.0]
    assert corrid["control"][0]["data_type"] == "TYPE_UINT64"
    assert sequence["oldest"]["max_candidate_sequences"] == 4
    assert sequence["oldest"]["preferred_batch_size"] == [2]


# --- version policy ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "available", "expected"),
    [
        (VersionPolicy(), [1, 2, 3], [3]),
        (VersionPolicy(), [10, 9, 2], [10]),  # numeric order, not the order found on disk
        (VersionPolicy(num_versions=2), [1, 2, 3], [2, 3]),
        (VersionPolicy(num_versions=5), [1, 2], [1, 2]),
        (VersionPolicy(), [], []),
        (VersionPolicy(kind="all"), [3, 1, 2], [1, 2, 3]),
        (VersionPolicy(kind="specific", versions=[1, 3]), [1, 2, 3], [1, 3]),
        (VersionPolicy(kind="specific", versions=[1, 3]), [1, 2], [1]),
        (VersionPolicy(kind="specific", versions=[7]), [1, 2], []),
    ],
)
def test_version_policy_selects_like_triton(
    policy: VersionPolicy, available: list[int], expected: list[int]
) -> None:
    assert policy.select(available) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("version_policy: { latest: { num_versions: 2 } }", VersionPolicy(num_versions=2)),
        ("version_policy: { all: {} }", VersionPolicy(kind="all")),
        (
            "version_policy: { specific: { versions: [ 4, 2 ] } }",
            VersionPolicy(kind="specific", versions=[4, 2]),
        ),
    ],
)
def test_version_policy_is_parsed(text: str, expected: VersionPolicy) -> None:
    assert parse_pbtxt(MINIMAL + text + "\n", SOURCE).version_policy == expected


# --- priority levels and queue policies -------------------------------------------------------


def test_priority_levels_and_per_level_queue_policies() -> None:
    config = parse_pbtxt(
        MINIMAL
        + "max_batch_size: 8\n"
        + "dynamic_batching {\n"
        + "  priority_levels: 2\n"
        + "  default_priority_level: 1\n"
        + "  default_queue_policy { max_queue_size: 100 }\n"
        + "  priority_queue_policy { key: 2 value { timeout_action: DELAY"
        + " default_timeout_microseconds: 250 allow_timeout_override: true } }\n"
        + "}\n",
        SOURCE,
    )
    assert config.priority_levels() == [1, 2]
    assert config.default_priority() == 1
    batching = config.dynamic_batching
    assert batching is not None
    assert batching.queue_policy(1) == QueuePolicy(max_queue_size=100)
    assert batching.queue_policy(2) == QueuePolicy(
        timeout_action="DELAY", default_timeout_microseconds=250, allow_timeout_override=True
    )


def test_dynamic_batching_without_priorities_uses_one_level() -> None:
    config = parse_pbtxt(MINIMAL + "max_batch_size: 8\ndynamic_batching { }\n", SOURCE)
    batching = config.dynamic_batching
    assert batching is not None
    assert batching.max_queue_delay_microseconds == 0
    assert batching.queue_policy(1) == QueuePolicy()
    assert config.priority_levels() == [1]
    assert config.default_priority() == 1


# --- errors: where and what -------------------------------------------------------------------


def test_unknown_field_names_file_line_column_and_field() -> None:
    message = parse_error(MINIMAL + "max_batch: 8\n")
    assert message.startswith(f"{SOURCE}:3:1")
    assert '"max_batch"' in message


def test_bad_enum_value_names_its_position_and_value() -> None:
    message = parse_error(
        MINIMAL + 'input [\n  { name: "x" data_type: TYPE_FLOAT32 dims: [ 1 ] }\n]\n'
    )
    assert message.startswith(f"{SOURCE}:4:")
    assert "TYPE_FLOAT32" in message
    assert "DataType" in message


def test_oneof_conflict_names_both_members() -> None:
    message = parse_error(MINIMAL + "version_policy { latest { num_versions: 2 } all { } }\n")
    assert message.startswith(f"{SOURCE}:3:")
    assert '"all"' in message and '"latest"' in message
    assert "policy_choice" in message


def test_scheduling_oneof_conflict_is_rejected() -> None:
    message = parse_error(MINIMAL + "dynamic_batching { }\nsequence_batching { }\n")
    assert message.startswith(f"{SOURCE}:4:")
    assert "scheduling_choice" in message


def test_syntax_error_names_the_line() -> None:
    message = parse_error(MINIMAL + 'input [ { name: "x"\n')
    assert message.startswith(f"{SOURCE}:3:")


@pytest.mark.parametrize(
    ("extra", "fragments"),
    [
        (
            "max_batch_size: 4\ndynamic_batching { preferred_batch_size: [ 2, 8 ] }",
            ["field 'dynamic_batching.preferred_batch_size'", "has 8", "max_batch_size (4)"],
        ),
        (
            "max_batch_size: 4\ndynamic_batching { preferred_batch_size: [ 0 ] }",
            ["field 'dynamic_batching.preferred_batch_size'", "has 0"],
        ),
        ("max_batch_size: -1", ["field 'max_batch_size'", "is -1", "expected 0 or more"]),
        (
            'input [ { name: "x" data_type: TYPE_FP32 dims: [ 0 ] } ]',
            ["field 'input.dims'", "of 'x' is [0]", "expected sizes >= 1 or -1"],
        ),
        (
            'output [ { name: "y" data_type: TYPE_FP32 dims: [ -2 ] } ]',
            ["field 'output.dims'", "of 'y' is [-2]"],
        ),
        (
            'input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] },\n'
            '        { name: "x" data_type: TYPE_INT32 dims: [ 1 ] } ]',
            ["field 'input'", "names 'x' twice"],
        ),
        (
            "input [ { data_type: TYPE_FP32 dims: [ 1 ] } ]",
            ["field 'input'", "without a name"],
        ),
        (
            "dynamic_batching { priority_levels: 2 default_priority_level: 3 }",
            ["field 'dynamic_batching.default_priority_level'", "is 3", "expected 1..2"],
        ),
        (
            "dynamic_batching { priority_levels: 2 default_priority_level: 1\n"
            "  priority_queue_policy { key: 5 value { max_queue_size: 1 } } }",
            ["field 'dynamic_batching.priority_queue_policy'", "level 5", "(2)"],
        ),
        (
            "instance_group [ { count: -2 } ]",
            ["field 'instance_group.count'", "is -2", "expected 1 or more"],
        ),
    ],
)
def test_invalid_values_name_the_model_and_field(extra: str, fragments: list[str]) -> None:
    message = parse_error(MINIMAL + extra + "\n")
    assert message.startswith(f"{SOURCE}: model 'm': ")
    for fragment in fragments:
        assert fragment in message


def test_missing_data_type_is_an_error() -> None:
    message = parse_error(MINIMAL + 'input [ { name: "x" dims: [ 1 ] } ]\n')
    assert message == f"{SOURCE}: input 'x' has no field 'data_type' (expected TYPE_*)"


def test_missing_platform_and_backend_is_an_error() -> None:
    message = parse_error('name: "m"\nmax_batch_size: 1\n')
    assert "field 'platform' and 'backend' are both empty" in message


def test_missing_name_without_default_is_an_error() -> None:
    message = parse_error('platform: "onnxruntime_onnx"\n')
    assert "field 'name' is empty" in message


# --- from_json and load ------------------------------------------------------------------------


def test_from_json_builds_a_config() -> None:
    config = from_json(
        {
            "name": "j",
            "backend": "onnxruntime",
            "max_batch_size": 4,
            "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [3]}],
            "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": ["3"]}],
            "dynamic_batching": {"max_queue_delay_microseconds": "500"},
        }
    )
    assert (config.name, config.platform, config.max_batch_size) == ("j", "onnxruntime_onnx", 4)
    assert config.inputs[0].dims == [3]
    assert config.outputs[0].dims == [3]
    assert config.dynamic_batching is not None
    assert config.dynamic_batching.max_queue_delay_microseconds == 500
    assert config.json["dynamic_batching"]["max_queue_delay_microseconds"] == 500


def test_from_json_unknown_field_names_source_and_field() -> None:
    with pytest.raises(ConchError) as info:
        from_json({"name": "j", "backend": "onnxruntime", "max_batch": 1}, source="load request")
    assert info.value.code is ErrorCode.INVALID_ARG
    assert info.value.message.startswith("load request: ")
    assert '"max_batch"' in info.value.message


def test_from_json_bad_enum_names_the_value() -> None:
    with pytest.raises(ConchError) as info:
        from_json(
            {
                "name": "j",
                "backend": "onnxruntime",
                "input": [{"name": "x", "data_type": "TYPE_FLOAT32", "dims": [1]}],
            }
        )
    assert "TYPE_FLOAT32" in info.value.message
    assert "data_type" in info.value.message


def test_load_takes_the_name_from_the_directory(tmp_path: Path) -> None:
    model_dir = write_model_dir(tmp_path, "densenet", 'platform: "onnxruntime_onnx"\n')
    config = load(model_dir)
    assert config.name == "densenet"
    assert config.instance_groups[0].name == "densenet_0"


def test_load_rejects_a_name_that_differs_from_the_directory(tmp_path: Path) -> None:
    model_dir = write_model_dir(tmp_path, "densenet", MINIMAL)
    with pytest.raises(ConchError) as info:
        load(model_dir)
    assert info.value.code is ErrorCode.INVALID_ARG
    assert info.value.message == (
        f"{model_dir / 'config.pbtxt'}: field 'name' is 'm' but the model directory is "
        "'densenet'; Triton requires them to match"
    )


def test_load_reports_a_missing_config(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConchError) as info:
        load(tmp_path / "empty")
    assert info.value.message.startswith(f"{tmp_path / 'empty' / 'config.pbtxt'}: no config.pbtxt")


def test_load_errors_name_the_real_file_path(tmp_path: Path) -> None:
    model_dir = write_model_dir(tmp_path, "m", MINIMAL + "max_batch: 8\n")
    with pytest.raises(ConchError) as info:
        load(model_dir)
    assert info.value.message.startswith(f"{model_dir / 'config.pbtxt'}:3:1")


# --- divergences from Triton (known bugs) ----------------------------------------------------


def test_empty_preferred_batch_size_normalises_to_max_batch_size() -> None:
    config = parse_pbtxt(MINIMAL + "max_batch_size: 16\ndynamic_batching { }\n", SOURCE)
    assert config.dynamic_batching is not None
    assert config.dynamic_batching.preferred_batch_size == [16]
    assert config.json["dynamic_batching"]["preferred_batch_size"] == [16]


def test_preferred_batch_size_with_max_batch_size_zero_is_rejected() -> None:
    message = parse_error(MINIMAL + "dynamic_batching { preferred_batch_size: [ 4 ] }\n")
    assert "dynamic_batching.preferred_batch_size" in message


def test_implicit_instance_group_is_named_like_tritons() -> None:
    # Triton's NormalizeInstanceGroup names unnamed groups "<model>_<index>".
    assert parse_pbtxt(MINIMAL, SOURCE).instance_groups[0].name == "m_0"


def test_sequence_idle_defaults_to_one_second() -> None:
    config = parse_pbtxt(MINIMAL + "max_batch_size: 4\nsequence_batching { }\n", SOURCE)
    assert config.sequence_batching is not None
    assert config.sequence_batching["max_sequence_idle_microseconds"] == 1_000_000


def test_preserve_ordering_with_priority_levels_is_rejected() -> None:
    message = parse_error(
        MINIMAL + "max_batch_size: 4\n"
        "dynamic_batching { preserve_ordering: true priority_levels: 2 "
        "default_priority_level: 1 }\n"
    )
    assert "preserve_ordering" in message
