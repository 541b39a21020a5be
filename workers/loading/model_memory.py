"""How many bytes a loaded model holds: measured around its load, not guessed from its files.

A model's footprint is rarely its files' size: frameworks copy weights into their own layouts,
allocate arenas and workspaces at warm-up, and compile kernels; some map files and touch only
part of them. So the worker reads the memory of the process the model lives in before the load
and after load + warm-up, and charges the difference to the model:

- host: the process's USS (memory only it holds; shared libraries already mapped by another
  process are not the model's), RSS where USS cannot be read. USS reads /proc/<pid>/smaps,
  a few milliseconds, acceptable once per load.
- GPU, when the model's instances are on one: the device's memory in use from NVML (every
  allocator: ONNX Runtime's, TensorRT's, PyTorch's), and PyTorch's own count where PyTorch is
  already imported; the larger of the two deltas, each seeing memory the other may not (NVML
  sees what PyTorch's caching allocator reserved before, not what a new model's tensors take
  of it). PyTorch is never imported here: importing it would itself move the host reading by
  hundreds of megabytes. Where neither can be read, the host's delta stands in (floored at
  the files, which a GPU model's weights roughly are).

Allocators keep memory they freed (an unloaded model's pages, a warm-up's buffers) and hand it
to the next load, so a delta can read near zero for a model that certainly holds its weights.
Two defences: before each reading, glibc's ``malloc_trim`` returns what this process's
allocator holds free to the system (where glibc is the allocator; milliseconds, twice per
load), so the load's pages count as new and what the load freed again (a parsed file, a
warm-up's scratch) does not count as the model's; and the delta is floored at the model
files' size on disk, for what trimming cannot return (fragments inside the heap, other
allocators' pools).

A delta is only the model's if nothing else allocated meanwhile: the worker measures one load
at a time. For a model that lives in another process (the python backend's stub), the caller
reads that process (``pid``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil


@dataclass(frozen=True)
class MemoryReading:
    """One reading of a process: host bytes, and device bytes where a GPU was asked for and
    could be read (None: not on a GPU, or neither NVML nor PyTorch could say)."""

    host_bytes: int
    gpu_nvml_bytes: int | None = None
    gpu_torch_bytes: int | None = None


@dataclass(frozen=True)
class ModelMemory:
    """A loaded model's measured memory.

    ``host_bytes``/``gpu_bytes``: the deltas across load + warm-up (never negative; gpu None
    when not on a GPU); ``files_bytes``: the model files' size on disk; ``bytes``: what the
    model is charged against its worker's budget: the delta of the memory the budget is of
    (the GPU's for a model on a GPU, else the host's), at least ``files_bytes``.
    """

    host_bytes: int
    gpu_bytes: int | None
    files_bytes: int

    @property
    def bytes(self) -> int:
        measured = self.gpu_bytes if self.gpu_bytes is not None else self.host_bytes
        return max(measured, self.files_bytes)


@functools.cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, or None where the C library is not glibc (musl, macOS)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None


def trim_allocator() -> bool:
    """Return this process's free heap memory to the system; False where it cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def host_bytes(pid: int | None = None) -> int:
    """The process's USS, or its RSS where USS is unavailable (no /proc smaps, no permission)."""
    process = psutil.Process(pid)
    try:
        return int(process.memory_full_info().uss)
    except (psutil.AccessDenied, AttributeError, NotImplementedError):
        return int(process.memory_info().rss)


def _nvml_memory(device: int) -> Any:
    """NVML's memory info (``total``, ``used``) of GPU ``device``; None where NVML cannot say
    (no nvidia-ml-py, no driver, no such device)."""
    try:
        import pynvml
    except ImportError:
        return None
    nvml: Any = pynvml  # no stubs
    try:
        nvml.nvmlInit()
    except Exception:
        return None
    try:
        return nvml.nvmlDeviceGetMemoryInfo(_handle(nvml, device))
    except Exception:
        return None
    finally:
        nvml.nvmlShutdown()


def nvml_device_bytes(device: int) -> int | None:
    """The memory in use on GPU ``device`` (its index as CUDA numbers it here, mapped through
    ``CUDA_VISIBLE_DEVICES``) as NVML sees it; None where NVML cannot say.

    The device's figure, not the process's: NVML's per-process list names host pids, which a
    container's pid namespace hides, and a fleet runs in containers. A worker drives its GPU
    alone (``conch up`` starts one per GPU), so the device's delta is the worker's.
    """
    memory = _nvml_memory(device)
    return None if memory is None else int(memory.used)


def gpu_total_bytes(device: int) -> int | None:
    """GPU ``device``'s total memory, which a fractional ``--model-memory-budget`` of a GPU
    worker is of (``shared.placement.budget.resolve_budget``); None where NVML cannot say."""
    memory = _nvml_memory(device)
    return None if memory is None else int(memory.total)


def _handle(nvml: Any, device: int) -> Any:
    """NVML numbers every GPU of the host; CUDA numbers those ``CUDA_VISIBLE_DEVICES`` names,
    by index or by UUID (``GPU-...``)."""
    named = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if device < len(named):
        if named[device].isdigit():
            return nvml.nvmlDeviceGetHandleByIndex(int(named[device]))
        return nvml.nvmlDeviceGetHandleByUUID(named[device])
    return nvml.nvmlDeviceGetHandleByIndex(device)


def torch_process_bytes(device: int) -> int | None:
    """``torch.cuda.memory_allocated``: the tensors PyTorch holds on the device; None unless
    PyTorch is already imported with CUDA initialised (never imported or initialised here)."""
    torch: Any = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.cuda.is_initialized():
            return None
        return int(torch.cuda.memory_allocated(device))
    except Exception:
        return None


def read(pid: int | None = None, gpu_device: int | None = None) -> MemoryReading:
    """One reading of process ``pid`` (this one by default); the GPU's when ``gpu_device`` is
    the CUDA index of the device the model's instances are on. PyTorch's count is of this
    process only, so it is not read for another process."""
    if gpu_device is None:
        return MemoryReading(host_bytes(pid))
    own = pid is None or pid == os.getpid()
    return MemoryReading(
        host_bytes(pid),
        nvml_device_bytes(gpu_device),
        torch_process_bytes(gpu_device) if own else None,
    )


def files_bytes(paths: Iterable[Path]) -> int:
    """The size on disk of the model's files: each path, a file or a directory walked whole.

    Symbolic links are followed (a repository that links its weights holds them all the same);
    a file that vanishes while walked counts as nothing.
    """
    total = 0
    for path in paths:
        candidates = [path] if path.is_file() else (p for p in path.rglob("*") if p.is_file())
        for file in candidates:
            try:
                total += file.stat().st_size
            except OSError:
                continue
    return total


def _delta(before: int | None, after: int | None) -> int | None:
    if before is None or after is None:
        return None
    return max(after - before, 0)


def model_memory(before: MemoryReading, after: MemoryReading, files: int) -> ModelMemory:
    """The model's memory from readings before and after its load + warm-up (pure)."""
    gpu_deltas = [
        d
        for d in (
            _delta(before.gpu_nvml_bytes, after.gpu_nvml_bytes),
            _delta(before.gpu_torch_bytes, after.gpu_torch_bytes),
        )
        if d is not None
    ]
    return ModelMemory(
        host_bytes=max(after.host_bytes - before.host_bytes, 0),
        gpu_bytes=max(gpu_deltas) if gpu_deltas else None,
        files_bytes=files,
    )


class MemoryMeter:
    """Measures what a load holds: ``with MemoryMeter(files) as meter: load(); warm_up()``,
    then ``meter.result``. The result is set only when the block succeeds: a load that failed
    has nothing to charge."""

    def __init__(
        self, files: Iterable[Path], *, pid: int | None = None, gpu_device: int | None = None
    ) -> None:
        self._files = tuple(files)
        self._pid = pid
        self._gpu_device = gpu_device
        self._before: MemoryReading | None = None
        self.result: ModelMemory | None = None

    def _trim(self) -> None:
        if self._pid is None or self._pid == os.getpid():
            trim_allocator()

    def __enter__(self) -> MemoryMeter:
        self._trim()
        self._before = read(self._pid, self._gpu_device)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if kind is not None or self._before is None:
            return
        self._trim()
        after = read(self._pid, self._gpu_device)
        self.result = model_memory(self._before, after, files_bytes(self._files))
