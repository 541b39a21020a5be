"""GPU paths of every backend, compared with the same model on CPU. Skipped without a GPU.

Run on a GPU machine with ``pytest -m gpu tests/gpu``. Each test skips (with the reason) when
the piece it needs is absent: CUDA in torch, the CUDA provider in onnxruntime, TensorRT, NVML.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from shared.model_config import InstanceGroup
from shared.runtime import gpu
from shared.storage.repository import RepositoryModel, read_model
from shared.wire.errors import ConchError
from workers.backend import LoadSpec, ModelInstance, ModelRequest

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
GPU_GROUP = InstanceGroup(name="gpu", kind="KIND_GPU", count=1)
CPU_GROUP = InstanceGroup(name="cpu", kind="KIND_CPU", count=1)


def load_script(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def spec_for(model: RepositoryModel, group: InstanceGroup, index: int = 0) -> LoadSpec:
    device = "gpu" if group.kind == "KIND_GPU" else "cpu"
    return LoadSpec(model.config, 1, model.version_path(1), model.path, group, index, device, 0)


def random_requests(model: RepositoryModel, sizes: list[int]) -> list[ModelRequest]:
    rng = np.random.default_rng(7)
    return [
        ModelRequest(
            id=f"r{i}",
            inputs={
                t.name: rng.standard_normal((n, *t.dims)).astype(np.float32)
                for t in model.config.inputs
            },
            requested_outputs=model.config.output_names,
        )
        for i, n in enumerate(sizes)
    ]


def assert_same(a: ModelInstance, b: ModelInstance, requests: list[ModelRequest]) -> None:
    for x, y in zip(a.execute(requests).results, b.execute(requests).results, strict=True):
        assert x.error is None and y.error is None, (x.error, y.error)
        for name, value in x.outputs.items():
            np.testing.assert_allclose(value, y.outputs[name], rtol=1e-3, atol=1e-4)


def require_gpu() -> None:
    if gpu.gpu_count() == 0:
        pytest.skip("no NVIDIA GPU visible")


@pytest.fixture(scope="module")
def torch_cuda() -> Any:
    require_gpu()
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip(f"torch {torch.__version__} has no CUDA")
    return torch


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gpu_repo")
    load_script(ROOT / "examples" / "make_models.py").write_repository(root, ["mlp"])
    return root


@pytest.mark.parametrize("name", ["torchscript_mlp", "export_mlp"])
def test_pytorch_on_cuda_matches_cpu(torch_cuda: Any, tmp_path: Path, name: str) -> None:
    from workers.pytorch.backend import PyTorchBackend, PyTorchInstance

    load_script(ROOT / "examples" / "make_backend_models.py").write_repository(tmp_path, [name])
    model = read_model(tmp_path / name)
    on_gpu = PyTorchBackend().load(spec_for(model, GPU_GROUP))
    on_cpu = PyTorchBackend().load(spec_for(model, CPU_GROUP))
    assert isinstance(on_gpu, PyTorchInstance) and on_gpu.device.type == "cuda"
    assert on_gpu.stream is not None
    assert_same(on_gpu, on_cpu, random_requests(model, [1, 3, 4]))
    on_gpu.unload()


def test_onnxruntime_cuda_provider(repo: Path) -> None:
    require_gpu()
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("this onnxruntime build has no CUDA provider (install onnxruntime-gpu)")
    from workers.onnxruntime.backend import OnnxRuntimeBackend, OnnxRuntimeInstance

    model = read_model(repo / "mlp")
    on_gpu = OnnxRuntimeBackend().load(spec_for(model, GPU_GROUP))
    on_cpu = OnnxRuntimeBackend().load(spec_for(model, CPU_GROUP))
    assert isinstance(on_gpu, OnnxRuntimeInstance) and on_gpu.on_gpu
    assert on_gpu.session.get_providers()[0] == "CUDAExecutionProvider"
    assert_same(on_gpu, on_cpu, random_requests(model, [2, 5]))


@pytest.fixture(scope="module")
def engine_model(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> RepositoryModel:
    from workers.tensorrt.backend import host_problems

    problems = host_problems()
    if problems:
        pytest.skip("; ".join(problems))
    script = load_script(ROOT / "scripts" / "build_trt_engine.py")
    out = tmp_path_factory.mktemp("trt_repo")
    script.main([str(repo / "mlp" / "1" / "model.onnx"), "--repo", str(out), "--name", "mlp_trt"])
    return read_model(out / "mlp_trt")


def test_tensorrt_engine_matches_onnxruntime(engine_model: RepositoryModel, repo: Path) -> None:
    from workers.onnxruntime.backend import OnnxRuntimeBackend
    from workers.tensorrt.backend import TensorRTBackend

    assert engine_model.config.max_batch_size == 64
    assert engine_model.config.input_names == ["INPUT0"]
    engine = TensorRTBackend().load(spec_for(engine_model, GPU_GROUP))
    reference = OnnxRuntimeBackend().load(spec_for(read_model(repo / "mlp"), CPU_GROUP))
    assert_same(engine, reference, random_requests(engine_model, [1, 7, 16]))
    engine.unload()


def test_tensorrt_shape_outside_profile_is_a_clear_error(engine_model: RepositoryModel) -> None:
    from workers.tensorrt.backend import TensorRTBackend, TensorRTInstance

    engine = TensorRTBackend().load(spec_for(engine_model, GPU_GROUP))
    assert isinstance(engine, TensorRTInstance)
    with pytest.raises(ConchError, match="outside the engine's optimization profile"):
        engine.run({"INPUT0": np.zeros((65, 256), np.float32)}, ["OUTPUT0"])


def test_tensorrt_two_instances_two_streams(engine_model: RepositoryModel) -> None:
    from workers.tensorrt.backend import TensorRTBackend, TensorRTInstance

    group = InstanceGroup(name="gpu", kind="KIND_GPU", count=2)
    pair = [TensorRTBackend().load(spec_for(engine_model, group, i)) for i in range(2)]
    assert all(isinstance(p, TensorRTInstance) for p in pair)
    assert pair[0].stream.cuda_stream != pair[1].stream.cuda_stream  # type: ignore[attr-defined]
    requests = random_requests(engine_model, [8])
    outputs: dict[int, np.ndarray] = {}

    def drive(index: int) -> None:
        for _ in range(10):
            (result,) = pair[index].execute(requests).results
            outputs[index] = result.outputs["OUTPUT0"]

    threads = [threading.Thread(target=drive, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    np.testing.assert_allclose(outputs[0], outputs[1], rtol=1e-5)


def test_gpu_metrics_from_nvml() -> None:
    require_gpu()
    from prometheus_client import CollectorRegistry

    from workers.gpu_metrics import register_gpu_metrics

    registry = CollectorRegistry()
    if register_gpu_metrics(registry) is None:
        pytest.skip("NVML unavailable (pip install nvidia-ml-py)")
    totals = [
        s for f in registry.collect() for s in f.samples if s.name == "nv_gpu_memory_total_bytes"
    ]
    assert len(totals) == gpu.gpu_count()
    assert all(s.value > 0 and s.labels["gpu_uuid"].startswith("GPU-") for s in totals)
