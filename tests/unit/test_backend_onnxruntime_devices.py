"""ONNX Runtime instance kinds on a CPU host: KIND_CPU gets the CPU provider, KIND_GPU refuses.

The GPU use is read from the session's providers, so a GPU build of onnxruntime on a machine
without CUDA (which still lists the CUDA provider as available) cannot pass for a GPU instance.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

from shared.model_config import InstanceGroup, parse_pbtxt  # noqa: E402
from shared.wire.errors import ConchError, ErrorCode  # noqa: E402
from workers.backend import LoadSpec, ModelRequest  # noqa: E402
from workers.onnxruntime.backend import OnnxRuntimeBackend, OnnxRuntimeInstance  # noqa: E402

CONFIG = """
name: "double" platform: "onnxruntime_onnx" max_batch_size: 4
input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""


def write_model(version: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "X"], ["Y"])],
        "double",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 2])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    version.mkdir(parents=True)
    onnx.save(model, str(version / "model.onnx"))


def spec(tmp_path: Path, kind: str, device: str = "cpu") -> LoadSpec:
    if not (tmp_path / "1" / "model.onnx").exists():
        write_model(tmp_path / "1")
    config = parse_pbtxt(CONFIG)
    group = InstanceGroup(name="g", kind=kind, count=1)
    return LoadSpec(config, 1, tmp_path / "1", tmp_path, group, 0, device=device)


def test_kind_cpu_uses_the_cpu_provider(tmp_path: Path) -> None:
    instance = OnnxRuntimeBackend().load(spec(tmp_path, "KIND_CPU"))
    assert isinstance(instance, OnnxRuntimeInstance)
    assert instance.session.get_providers() == ["CPUExecutionProvider"]
    assert not instance.on_gpu
    request = ModelRequest("r", {"X": np.array([[1.0, 2.0]], np.float32)}, ["Y"])
    (result,) = instance.execute([request]).results
    np.testing.assert_array_equal(result.outputs["Y"], [[2.0, 4.0]])


def test_kind_gpu_without_a_gpu_fails_clearly(tmp_path: Path) -> None:
    probe = OnnxRuntimeBackend().load(spec(tmp_path, "KIND_AUTO", device="gpu"))
    if isinstance(probe, OnnxRuntimeInstance) and probe.on_gpu:
        pytest.skip("onnxruntime runs on a GPU here")
    with pytest.raises(ConchError) as caught:
        OnnxRuntimeBackend().load(spec(tmp_path, "KIND_GPU", device="gpu"))
    assert caught.value.code == ErrorCode.UNAVAILABLE
    message = caught.value.message
    assert "KIND_GPU" in message and "could not use a GPU" in message
    assert "\n" not in message
