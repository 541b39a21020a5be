"""CUDA shared memory (Triton's extension): the gateway opens a client's CUDA IPC handle and
copies bytes off and onto the device through the CUDA runtime (``gateway.extensions.cuda_ipc``).

The client is another process, as in real use (a CUDA IPC handle cannot be opened by the process
that exported it): it allocates device memory with CuPy, fills it, exports the handle, waits
while this process reads and writes through it, then reads back what was written. Skipped
without a GPU or CuPy. Runs under pytest (``-m gpu``) or alone: ``python3 <this file>``.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gateway.extensions import cuda_ipc  # the project root first, for the stand-alone run

try:
    import pytest

    pytestmark = pytest.mark.gpu
except ImportError:  # the stand-alone run on a GPU machine
    pytest = None  # type: ignore[assignment]

SIZE = 64


def client(conn: Any) -> None:
    import cupy as cp

    device = cp.arange(SIZE // 4, dtype=cp.int32)
    handle = cp.cuda.runtime.ipcGetMemHandle(device.data.ptr)
    conn.send(bytes(handle))
    conn.recv()  # the server is done
    conn.send(cp.asnumpy(device).tolist())


def check_cuda_ipc_round_trip() -> None:
    runtime = cuda_ipc.runtime()
    assert runtime is not None, "a GPU is present but no CUDA runtime library was found"
    context = mp.get_context("spawn")
    mine, theirs = context.Pipe()
    process = context.Process(target=client, args=(theirs,))
    process.start()
    try:
        handle = mine.recv()
        assert len(handle) == cuda_ipc.HANDLE_SIZE
        address = runtime.open(handle, 0)
        found = np.frombuffer(runtime.read(address, SIZE, 0), dtype=np.int32)
        assert found.tolist() == list(range(SIZE // 4))  # an input read off the device
        runtime.write(address + 8, np.array([-7, -8], dtype=np.int32).tobytes(), 0)  # an output
        runtime.close(address)
        mine.send("done")
        written = mine.recv()
        assert written[:4] == [0, 1, -7, -8] and written[4:] == list(range(4, SIZE // 4))
    finally:
        process.join(30)


def test_cuda_ipc_round_trip() -> None:
    if cuda_ipc.gpu.gpu_count() == 0:
        pytest.skip("no GPU")
    pytest.importorskip("cupy")
    check_cuda_ipc_round_trip()


def test_no_gpu_no_runtime() -> None:
    """Without a GPU the runtime is None and registration answers "GPUs not supported"."""
    if cuda_ipc.gpu.gpu_count() > 0:
        pytest.skip("a GPU is present")
    assert cuda_ipc.runtime() is None


if __name__ == "__main__":
    check_cuda_ipc_round_trip()
    print("CUDA IPC round trip: ok")
