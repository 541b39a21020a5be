"""The OpenVINO backend: Triton's parameter keys read into options (pure), and on a tiny IR
written by the test: auto-complete from the ports, load-time checks, batching modes, type
conversion and the errors a wrong configuration gets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shared.model_config import InstanceGroup, parse_pbtxt
from shared.wire.errors import ConchError, ErrorCode
from workers.backend import LoadSpec, ModelRequest
from workers.openvino import parameters

# --- parameters (no openvino needed) --------------------------------------------------------


def test_defaults_leave_cores_to_the_mesh_and_keep_f32() -> None:
    options = parameters.parse("m", {})
    assert options.properties == {
        "INFERENCE_NUM_THREADS": "1",
        "ENABLE_CPU_PINNING": "NO",
        "INFERENCE_PRECISION_HINT": "f32",
    }
    assert not (options.skip_dynamic_batch or options.batch_padding or options.reshape_io_layers)
    assert options.ignored == ()


def test_triton_keys_become_openvino_properties() -> None:
    options = parameters.parse(
        "m",
        {
            "PERFORMANCE_HINT": "throughput",
            "NUM_STREAMS": "auto",
            "INFERENCE_NUM_THREADS": "4",
            "COMPILATION_NUM_THREADS": "2",
            "HINT_BF16": "yes",
            "ENABLE_CPU_PINNING": "YES",
            "SKIP_OV_DYNAMIC_BATCHSIZE": "Yes",
            "ENABLE_BATCH_PADDING": "YES",
            "RESHAPE_IO_LAYERS": "yes",
            "TARGET_DEVICE": "cpu",
            "CPU_EXTENSION_PATH": "/opt/ext.so",
            "max_threads": "3",
        },
    )
    assert options.properties == {
        "INFERENCE_NUM_THREADS": "4",
        "COMPILATION_NUM_THREADS": "2",
        "PERFORMANCE_HINT": "THROUGHPUT",
        "NUM_STREAMS": "AUTO",
        "ENABLE_CPU_PINNING": "YES",
        "INFERENCE_PRECISION_HINT": "bf16",
    }
    assert options.skip_dynamic_batch and options.batch_padding and options.reshape_io_layers
    assert options.cpu_extension_path == "/opt/ext.so"
    assert options.ignored == ("max_threads",)


@pytest.mark.parametrize("streams", ["NUMA", "3", "0"])
def test_num_streams_values(streams: str) -> None:
    assert parameters.parse("m", {"NUM_STREAMS": streams}).properties["NUM_STREAMS"] == streams


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("PERFORMANCE_HINT", "FAST", "LATENCY/THROUGHPUT/CUMULATIVE_THROUGHPUT"),
        ("NUM_STREAMS", "many", "AUTO/NUMA/<int_value>"),
        ("INFERENCE_NUM_THREADS", "-1", "a non-negative number"),
        ("COMPILATION_NUM_THREADS", "two", "a non-negative number"),
        ("SKIP_OV_DYNAMIC_BATCHSIZE", "true", "YES/NO"),
        ("ENABLE_BATCH_PADDING", "1", "YES/NO"),
        ("RESHAPE_IO_LAYERS", "on", "YES/NO"),
        ("HINT_BF16", "bf16", "YES/NO"),
        ("TARGET_DEVICE", "GPU", "CPU"),
    ],
)
def test_a_bad_value_names_the_key_the_value_and_what_is_accepted(
    key: str, value: str, expected: str
) -> None:
    with pytest.raises(ConchError) as info:
        parameters.parse("m", {key: value})
    assert info.value.code == ErrorCode.INVALID_ARG
    assert f"'{key}'" in info.value.message
    assert f"'{value}'" in info.value.message
    assert expected in info.value.message
    assert "model 'm'" in info.value.message


# --- a tiny IR ------------------------------------------------------------------------------

BATCHED = """
name: "tiny" backend: "openvino" max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [
  { name: "double" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "relu" data_type: TYPE_FP32 dims: [ 4 ] }
]
"""


@pytest.fixture
def ir(tmp_path: Path) -> Path:
    """``tmp_path/1/model.xml``: x [?, 4] f32 -> double = 2x, relu = max(x, 0)."""
    ov = pytest.importorskip("openvino")
    ops = pytest.importorskip("openvino.opset13")
    x = ops.parameter([-1, 4], ov.Type.f32, name="x")
    double = ops.multiply(x, ops.constant(np.float32(2)))
    relu = ops.relu(x)
    double.output(0).get_tensor().set_names({"double"})
    relu.output(0).get_tensor().set_names({"relu"})
    (tmp_path / "1").mkdir()
    model = ov.Model([double, relu], [x], "tiny")
    ov.save_model(model, tmp_path / "1" / "model.xml", compress_to_fp16=False)
    return tmp_path


def _load(ir: Path, text: str, kind: str = "KIND_CPU") -> Any:
    from workers.openvino.backend import OpenVinoBackend

    config = parse_pbtxt(text)
    group = InstanceGroup(name="g", kind=kind, count=1)
    return OpenVinoBackend().load(LoadSpec(config, 1, ir / "1", ir, group, 0))


def _complete(ir: Path, text: str) -> dict[str, Any] | None:
    from workers.openvino.backend import OpenVinoBackend

    config = parse_pbtxt(text)
    return OpenVinoBackend().auto_complete(config, ir / "1" / config.model_filename)


def test_auto_complete_drops_the_batch_dim_when_batching(ir: Path) -> None:
    completed = _complete(ir, 'name: "tiny" backend: "openvino" max_batch_size: 4')
    assert completed is not None
    assert completed["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": [4]}]
    assert [o["name"] for o in completed["output"]] == ["double", "relu"]
    assert completed["output"][0]["dims"] == [4]


def test_auto_complete_keeps_every_dim_unbatched_and_what_is_listed(ir: Path) -> None:
    text = (
        'name: "tiny" backend: "openvino" max_batch_size: 0 '
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]'
    )
    completed = _complete(ir, text)
    assert completed is not None
    assert completed["input"][0]["dims"] == [-1, 4]  # as listed
    assert completed["output"][1] == {"name": "relu", "data_type": "TYPE_FP32", "dims": [-1, 4]}
    assert _complete(ir, BATCHED) is None  # nothing to add
    assert _complete(ir, BATCHED + 'default_model_filename: "other.xml"') is None  # no file


def test_batched_requests_run_as_one_call_of_any_size(ir: Path) -> None:
    instance = _load(ir, BATCHED)
    x = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)
    requests = [
        ModelRequest("a", {"x": x[:1]}, ["double"]),
        ModelRequest("b", {"x": x[1:]}, ["relu", "double"]),
    ]
    first, second = instance.execute(requests).results
    np.testing.assert_array_equal(first.outputs["double"], 2 * x[:1])
    np.testing.assert_array_equal(second.outputs["relu"], np.maximum(x[1:], 0))
    assert set(first.outputs) == {"double"}


def test_a_config_datatype_is_converted_inside_the_model(ir: Path) -> None:
    instance = _load(ir, BATCHED.replace("TYPE_FP32", "TYPE_FP16"))
    x = np.array([[1.5, -2, 3, 4]], np.float16)
    (result,) = instance.execute([ModelRequest("a", {"x": x}, ["double"])]).results
    assert result.outputs["double"].dtype == np.float16
    np.testing.assert_array_equal(result.outputs["double"], 2 * x)


def test_fixed_batch_refuses_a_smaller_batch_unless_padding(ir: Path) -> None:
    skip = 'parameters { key: "SKIP_OV_DYNAMIC_BATCHSIZE" value: { string_value: "YES" } }\n'
    pad = 'parameters { key: "ENABLE_BATCH_PADDING" value: { string_value: "YES" } }\n'
    x = np.ones((2, 4), np.float32)
    two = [ModelRequest("a", {"x": x[:1]}, ["double"]), ModelRequest("b", {"x": x[1:]}, ["relu"])]
    results = _load(ir, BATCHED + skip).execute(two).results
    assert all(r.error is not None for r in results)
    assert "expected requests with batch size '4', got '2'" in results[0].error.message
    assert "ENABLE_BATCH_PADDING" in results[0].error.message
    padded = _load(ir, BATCHED + skip + pad).execute(two).results
    np.testing.assert_array_equal(padded[0].outputs["double"], [[2, 2, 2, 2]])
    np.testing.assert_array_equal(padded[1].outputs["relu"], [[1, 1, 1, 1]])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (('name: "x"', 'name: "image"'), "configuration input 'image' is not a model input"),
        (("dims: [ 4 ] }\n]", "dims: [ 5 ] }\n]"), "tensor 'relu': the model expects 2 dim"),
        (("TYPE_FP32 dims: [ 4 ] } ]", "TYPE_STRING dims: [ 4 ] } ]"), "OpenVINO has no string"),
        (("max_batch_size: 4", "max_batch_size: 0"), "specifies 1 dimensions"),
    ],
)
def test_a_config_that_does_not_fit_the_model_fails_to_load(
    ir: Path, change: tuple[str, str], message: str
) -> None:
    with pytest.raises(ConchError) as info:
        _load(ir, BATCHED.replace(*change))
    assert info.value.code == ErrorCode.INVALID_ARG
    assert message in info.value.message


def test_gpu_instances_and_a_missing_file_are_refused(ir: Path) -> None:
    with pytest.raises(ConchError, match="supports only Kind CPU and AUTO"):
        _load(ir, BATCHED, kind="KIND_GPU")
    with pytest.raises(ConchError, match="unable to find") as info:
        _load(ir, BATCHED + 'default_model_filename: "model.onnx"')
    assert info.value.code == ErrorCode.NOT_FOUND


def test_reshape_turns_the_configured_dims_into_the_model_s_and_back(ir: Path) -> None:
    text = BATCHED.replace(
        'name: "x" data_type: TYPE_FP32 dims: [ 4 ]',
        'name: "x" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape: { shape: [ 4 ] }',
    ).replace(
        'name: "relu" data_type: TYPE_FP32 dims: [ 4 ]',
        'name: "relu" data_type: TYPE_FP32 dims: [ 1, 4 ] reshape: { shape: [ 4 ] }',
    )
    instance = _load(ir, text)
    x = np.array([[[1, -2], [3, -4]]], np.float32)
    (result,) = instance.execute([ModelRequest("a", {"x": x}, ["double", "relu"])]).results
    np.testing.assert_array_equal(result.outputs["double"], [[2, -4, 6, -8]])
    np.testing.assert_array_equal(result.outputs["relu"], [[[1, 0, 3, 0]]])


def test_reshape_io_layers_gives_the_model_the_configured_dims(ir: Path) -> None:
    text = (
        'name: "tiny" backend: "openvino" max_batch_size: 0\n'
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ -1, -1 ] } ]\n'
        'output [ { name: "double" data_type: TYPE_FP32 dims: [ -1, -1 ] } ]\n'
        'parameters { key: "RESHAPE_IO_LAYERS" value: { string_value: "yes" } }\n'
    )
    with pytest.raises(ConchError, match="configuration expects 2 inputs, model provides 1"):
        _load(ir, text.replace("input [", 'input [ { name: "y" data_type: TYPE_FP32 dims: [1] },'))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)  # the IR's rows are 4 wide
    (result,) = _load(ir, text).execute([ModelRequest("a", {"x": x}, ["double"])]).results
    np.testing.assert_array_equal(result.outputs["double"], 2 * x)
    (fails,) = (
        _load(ir, text.replace("yes", "no"))
        .execute([ModelRequest("a", {"x": x}, ["double"])])
        .results
    )
    assert fails.error is not None


def test_an_ir_without_its_weights_fails_to_load_clearly(ir: Path) -> None:
    (ir / "1" / "model.bin").unlink()
    with pytest.raises(ConchError, match="OpenVINO cannot read") as info:
        _load(ir, BATCHED)
    assert info.value.code == ErrorCode.INVALID_ARG
    assert "model.xml" in info.value.message
