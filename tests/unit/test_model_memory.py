"""A loaded model's measured bytes: the process's memory across load + warm-up, floored at its
files' size; the GPU's where it lives on one. Real ONNX Runtime loads in this process."""

from __future__ import annotations

import gc
import importlib.util
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

from workers.loading import model_memory
from workers.loading.model_memory import MemoryMeter, MemoryReading, ModelMemory

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WIDTH = 2048  # a 2048 x 2048 FP32 weight: 16 MiB, well above allocator noise


@pytest.fixture(scope="module")
def make_models() -> types.ModuleType:
    """examples/make_models.py, imported from its path (examples/ is not a package)."""
    spec = importlib.util.spec_from_file_location("conch_make_models", EXAMPLES / "make_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


def write_wide(make_models: types.ModuleType, root: Path, name: str, seed: int) -> Path:
    """A one-layer FP32 model with distinct weights (a seed each), written as the examples are."""
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    weight = np.random.default_rng(seed).standard_normal((WIDTH, WIDTH)).astype(np.float32)
    inputs = (make_models.TensorDef("INPUT0", "FP32", WIDTH),)
    outputs = (make_models.TensorDef("OUTPUT0", "FP32", WIDTH),)
    graph = make_models._finish(
        name,
        [helper.make_node("MatMul", ["INPUT0", "W"], ["OUTPUT0"])],
        inputs,
        outputs,
        [numpy_helper.from_array(weight, "W")],
    )
    example = make_models.ExampleModel(name, graph, inputs, outputs, 8, None)
    return Path(make_models.write_model(root, example))


def load_and_warm(model_dir: Path, width: int) -> Any:
    session = ort.InferenceSession(
        str(model_dir / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    session.run(None, {"INPUT0": np.ones((8, width), np.float32)})
    return session


def test_a_real_load_is_charged_at_least_its_weights(
    make_models: types.ModuleType, tmp_path: Path
) -> None:
    kept = []
    model_dirs = [write_wide(make_models, tmp_path, f"wide{seed}", seed) for seed in range(3)]
    for model_dir in model_dirs:  # each load holds its own: the earlier ones are still held
        with MemoryMeter([model_dir]) as meter:
            kept.append(load_and_warm(model_dir, WIDTH))
        measured = meter.result
        assert measured is not None
        weights = WIDTH * WIDTH * 4
        assert measured.gpu_bytes is None
        assert measured.files_bytes > weights
        assert measured.host_bytes >= 0.75 * weights, measured
        assert measured.bytes >= measured.files_bytes


def test_the_loads_deltas_add_up_to_what_the_process_holds(
    make_models: types.ModuleType, tmp_path: Path
) -> None:
    """Each model is charged what it keeps, not what its load touched and freed again: the
    deltas of four loads sum to the growth of the process that holds all four."""
    model_dirs = [write_wide(make_models, tmp_path, f"sum{seed}", 10 + seed) for seed in range(4)]
    kept, charged = [], []
    with MemoryMeter([]) as whole:
        for model_dir in model_dirs:
            with MemoryMeter([model_dir]) as meter:
                kept.append(load_and_warm(model_dir, WIDTH))
            assert meter.result is not None
            charged.append(meter.result.host_bytes)
    assert whole.result is not None
    assert sum(charged) == pytest.approx(whole.result.host_bytes, rel=0.2), charged


def test_an_example_model_from_make_models(make_models: types.ModuleType, tmp_path: Path) -> None:
    model_dir = Path(make_models.write_model(tmp_path, make_models.build_mlp()))
    with MemoryMeter([model_dir]) as meter:
        session = load_and_warm(model_dir, 256)
    assert meter.result is not None
    on_disk = sum(p.stat().st_size for p in model_dir.rglob("*") if p.is_file())
    assert meter.result.files_bytes == on_disk
    assert meter.result.bytes >= on_disk
    del session


def test_a_load_into_freed_memory_is_floored_at_its_files(
    make_models: types.ModuleType, tmp_path: Path
) -> None:
    """Unload, load again: the allocator hands the freed pages back, the delta shrinks, and the
    floor charges at least the files."""
    model_dir = write_wide(make_models, tmp_path, "again", 7)
    session = load_and_warm(model_dir, WIDTH)
    del session
    gc.collect()
    with MemoryMeter([model_dir]) as meter:
        session = load_and_warm(model_dir, WIDTH)
    measured = meter.result
    assert measured is not None
    assert measured.bytes == max(measured.host_bytes, measured.files_bytes)
    assert measured.bytes >= WIDTH * WIDTH * 4
    del session


def test_the_allocator_is_trimmed_where_glibc_is_the_allocator() -> None:
    if sys.platform == "linux" and os.confstr("CS_GNU_LIBC_VERSION"):
        assert model_memory.trim_allocator() is True


def test_a_failed_load_measures_nothing(tmp_path: Path) -> None:
    meter = MemoryMeter([tmp_path])
    with pytest.raises(RuntimeError), meter:
        raise RuntimeError("load failed")
    assert meter.result is None


def test_the_delta_is_never_negative_and_the_floor_applies() -> None:
    before = MemoryReading(host_bytes=1000)
    assert model_memory.model_memory(before, MemoryReading(400), files=50) == ModelMemory(
        0, None, 50
    )
    grown = model_memory.model_memory(before, MemoryReading(1500), files=100)
    assert (grown.host_bytes, grown.bytes) == (500, 500)
    assert model_memory.model_memory(before, MemoryReading(1100), files=300).bytes == 300


def test_on_a_gpu_the_device_delta_is_charged_the_larger_of_nvml_and_torch() -> None:
    before = MemoryReading(1000, gpu_nvml_bytes=10_000, gpu_torch_bytes=0)
    after = MemoryReading(9000, gpu_nvml_bytes=10_000, gpu_torch_bytes=4000)
    measured = model_memory.model_memory(before, after, files=100)
    # NVML saw nothing new (PyTorch's cache had room); PyTorch's count saw the tensors.
    assert (measured.host_bytes, measured.gpu_bytes, measured.bytes) == (8000, 4000, 4000)
    only_nvml = model_memory.model_memory(
        MemoryReading(0, 100, None), MemoryReading(0, 700, None), files=0
    )
    assert only_nvml.gpu_bytes == 600
    # Asked for a GPU, but neither could be read: the host's delta is charged.
    unread = model_memory.model_memory(MemoryReading(0), MemoryReading(50), files=10)
    assert (unread.gpu_bytes, unread.bytes) == (None, 50)


def test_files_bytes_walks_directories_and_follows_links(tmp_path: Path) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "model.onnx").write_bytes(b"x" * 1000)
    (tmp_path / "m" / "config.pbtxt").write_bytes(b"y" * 10)
    (tmp_path / "weights.bin").write_bytes(b"z" * 500)
    (tmp_path / "m" / "1" / "linked.bin").symlink_to(tmp_path / "weights.bin")
    assert model_memory.files_bytes([tmp_path / "m"]) == 1510
    assert model_memory.files_bytes([tmp_path / "m" / "1" / "model.onnx"]) == 1000
    assert model_memory.files_bytes([tmp_path / "absent"]) == 0


def test_another_process_can_be_read() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert model_memory.host_bytes(child.pid) > 0
        reading = model_memory.read(child.pid, gpu_device=0)
        assert reading.gpu_torch_bytes is None  # PyTorch counts this process only
    finally:
        child.kill()
        child.wait()


def test_rss_stands_in_where_uss_cannot_be_read(monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(self: psutil.Process) -> None:
        raise psutil.AccessDenied(self.pid)

    monkeypatch.setattr(psutil.Process, "memory_full_info", denied)
    assert model_memory.host_bytes() == psutil.Process().memory_info().rss


def test_torch_is_read_only_where_already_initialised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert model_memory.torch_process_bytes(0) is None
    assert "torch" not in sys.modules  # never imported to find out
    cuda = types.SimpleNamespace(is_initialized=lambda: False, memory_allocated=lambda d: 123)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    assert model_memory.torch_process_bytes(0) is None
    cuda.is_initialized = lambda: True
    assert model_memory.torch_process_bytes(0) == 123


class FakeNvml:
    """pynvml's calls that model_memory makes, over two GPUs of 1 and 2 GB in use."""

    def __init__(self) -> None:
        self.used = {0: 1_000_000_000, 1: 2_000_000_000}
        self.uuids = {"GPU-aaaa": 0, "GPU-bbbb": 1}
        self.open = 0

    def nvmlInit(self) -> None:
        self.open += 1

    def nvmlShutdown(self) -> None:
        self.open -= 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index not in self.used:
            raise RuntimeError("NVML_ERROR_INVALID_ARGUMENT")
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        return self.uuids[uuid]

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return types.SimpleNamespace(used=self.used[handle], total=80 * 10**9)


@pytest.mark.parametrize(
    ("visible", "device", "expected"),
    [
        (None, 1, 2_000_000_000),
        ("1", 0, 2_000_000_000),  # CUDA's 0 is the host's 1
        ("1,0", 1, 1_000_000_000),
        ("GPU-bbbb", 0, 2_000_000_000),
        (None, 5, None),  # no such GPU: cannot say
    ],
)
def test_nvml_reads_the_device_cuda_numbers_here(
    monkeypatch: pytest.MonkeyPatch, visible: str | None, device: int, expected: int | None
) -> None:
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert model_memory.nvml_device_bytes(device) == expected
    assert model_memory.gpu_total_bytes(device) == (None if expected is None else 80 * 10**9)
    assert fake.open == 0  # shut down again, whatever happened


def test_without_nvml_the_gpu_cannot_be_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert model_memory.nvml_device_bytes(0) is None
    assert model_memory.gpu_total_bytes(0) is None


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@pytest.mark.skipif(not _cuda(), reason="needs PyTorch with a CUDA GPU")
def test_a_real_gpu_allocation_is_charged_to_the_gpu() -> None:
    import torch

    torch.zeros(1, device="cuda:0")  # the CUDA context before the first reading
    with MemoryMeter([], gpu_device=0) as meter:
        held = torch.ones(64 * 2**20 // 4, device="cuda:0")  # 64 MiB of FP32
    assert meter.result is not None
    assert meter.result.gpu_bytes is not None
    assert meter.result.gpu_bytes >= 64 * 2**20
    assert meter.result.bytes >= 64 * 2**20
    del held
