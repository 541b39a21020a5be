"""CUDA IPC through the CUDA runtime library (ctypes), for Triton's CUDA shared memory extension.

A client allocates GPU memory, exports a ``cudaIpcMemHandle_t`` and registers it; a gateway on
the same host opens the handle and copies input bytes off the device and output bytes onto it.
Only the runtime library is needed (no CUDA Python package): it ships with the NVIDIA driver
stack, PyTorch's CUDA wheels (``nvidia/cuda_runtime``) or a CUDA toolkit. Where there is no GPU
or no runtime library, :func:`runtime` is None and registration answers Triton's "GPUs not
supported" error.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import os
import sys
import threading

from shared.runtime import gpu

HANDLE_SIZE = 64  # sizeof(cudaIpcMemHandle_t)
_MEMCPY_HOST_TO_DEVICE = 1
_MEMCPY_DEVICE_TO_HOST = 2
_LAZY_ENABLE_PEER_ACCESS = 1


class _Handle(ctypes.Structure):
    """``cudaIpcMemHandle_t`` (64 opaque bytes), passed by value. Declared as eight 64-bit words,
    not as ``c_char * 64``: ctypes passed the array form wrongly by value (the runtime answered
    "invalid argument" to a handle that CuPy opened, on an H100 with CUDA 13)."""

    _fields_ = [(f"word{i}", ctypes.c_uint64) for i in range(HANDLE_SIZE // 8)]


class CudaError(Exception):
    pass


class CudaRuntime:
    def __init__(self, library: ctypes.CDLL):
        self._lib = library
        self._lock = threading.Lock()
        library.cudaIpcOpenMemHandle.argtypes = [
            ctypes.POINTER(ctypes.c_void_p),
            _Handle,
            ctypes.c_uint,
        ]
        library.cudaMemcpy.argtypes = [
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
        ]
        library.cudaIpcCloseMemHandle.argtypes = [ctypes.c_void_p]
        library.cudaSetDevice.argtypes = [ctypes.c_int]
        library.cudaGetErrorString.restype = ctypes.c_char_p

    def _check(self, code: int, what: str) -> None:
        if code != 0:
            # The runtime keeps a failed call's error as the thread's "last error" too; left
            # there, the next library in this process that checks cudaGetLastError (PyTorch
            # after a kernel) reports it as its own failure.
            self._lib.cudaGetLastError()
            text = self._lib.cudaGetErrorString(code).decode(errors="replace")
            raise CudaError(f"{what}: {text}")

    def open(self, raw_handle: bytes, device_id: int) -> int:
        """The device address of another process's exported allocation."""
        if len(raw_handle) != HANDLE_SIZE:
            raise CudaError("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
        pointer = ctypes.c_void_p()
        with self._lock:
            self._check(self._lib.cudaSetDevice(device_id), "failed to set the CUDA device")
            self._check(
                self._lib.cudaIpcOpenMemHandle(
                    ctypes.byref(pointer),
                    _Handle.from_buffer_copy(raw_handle),
                    _LAZY_ENABLE_PEER_ACCESS,
                ),
                "failed to open CUDA IPC handle",
            )
        return int(pointer.value or 0)

    def close(self, address: int) -> None:
        with self._lock:
            self._lib.cudaIpcCloseMemHandle(ctypes.c_void_p(address))

    def read(self, address: int, size: int, device_id: int) -> bytes:
        buffer = ctypes.create_string_buffer(size)
        with self._lock:
            self._check(self._lib.cudaSetDevice(device_id), "failed to set the CUDA device")
            self._check(
                self._lib.cudaMemcpy(
                    buffer, ctypes.c_void_p(address), size, _MEMCPY_DEVICE_TO_HOST
                ),
                "failed to copy from CUDA shared memory",
            )
        return buffer.raw

    def write(self, address: int, data: bytes, device_id: int) -> None:
        with self._lock:
            self._check(self._lib.cudaSetDevice(device_id), "failed to set the CUDA device")
            self._check(
                self._lib.cudaMemcpy(
                    ctypes.c_void_p(address), data, len(data), _MEMCPY_HOST_TO_DEVICE
                ),
                "failed to copy to CUDA shared memory",
            )


def _candidates() -> list[str]:
    found = [name for name in (ctypes.util.find_library("cudart"),) if name]
    for base in sys.path:
        found += sorted(
            glob.glob(os.path.join(base, "nvidia", "cuda_runtime", "lib", "libcudart.so*"))
        )
        found += sorted(glob.glob(os.path.join(base, "torch", "lib", "libcudart*.so*")))
    found += sorted(glob.glob("/usr/local/cuda*/lib64/libcudart.so*"))
    return found


@functools.cache
def runtime() -> CudaRuntime | None:
    """The CUDA runtime, where this host has a GPU and the library can be loaded."""
    if gpu.gpu_count() == 0:
        return None
    for candidate in _candidates():
        try:
            return CudaRuntime(ctypes.CDLL(candidate))
        except (OSError, AttributeError):
            continue
    return None
