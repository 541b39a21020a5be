"""How many NVIDIA GPUs this host has, without initialising CUDA in the calling process."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess


@functools.cache
def gpu_count() -> int:
    """GPUs this process may use: the host's, or as many as CUDA_VISIBLE_DEVICES names."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        named = [v for v in visible.split(",") if v.strip()]
        if not named or named[0].strip() == "-1":
            return 0
        return min(len(named), _host_count())
    return _host_count()


def _host_count() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
