"""The TensorRT backend on a host that cannot run it: one clear line saying what is missing.

The engine path itself needs a GPU and TensorRT; it is tested in ``tests/gpu``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.model_config import InstanceGroup, parse_pbtxt
from shared.wire.errors import ConchError, ErrorCode
from workers.backend import LoadSpec
from workers.backend_table import load_backend
from workers.tensorrt.backend import TensorRTBackend, host_problems

CONFIG = """
name: "engine" platform: "tensorrt_plan" max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def test_the_backend_table_loads_the_backend_without_tensorrt_installed() -> None:
    assert isinstance(load_backend("tensorrt"), TensorRTBackend)


def test_check_host_names_what_is_missing() -> None:
    problems = host_problems()
    if not problems:
        pytest.skip("this host can run TensorRT")
    with pytest.raises(ConchError) as caught:
        TensorRTBackend().check_host()
    message = caught.value.message
    assert caught.value.code == ErrorCode.UNAVAILABLE and "\n" not in message
    assert message.startswith("the tensorrt backend cannot run on this host: ")
    assert any(word in message for word in ("GPU", "'tensorrt'", "CUDA"))


def test_kind_cpu_is_refused(tmp_path: Path) -> None:
    config = parse_pbtxt(CONFIG)
    group = InstanceGroup(name="g", kind="KIND_CPU", count=1)
    with pytest.raises(ConchError, match="TensorRT engines run on GPUs only"):
        TensorRTBackend().load(LoadSpec(config, 1, tmp_path / "1", tmp_path, group, 0))
