"""The processes a benchmark run starts (the mesh, the peer) and the CPU each one uses."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from conch import http_wait
from conch.ports import free_port


def _wait_http(url: str, timeout_s: float) -> None:
    if not http_wait.wait_ok(url, timeout_s):
        raise SystemExit(f"{url} did not answer 200 within {timeout_s:.0f} s")


def start_mesh(repo: Path, port: int, extra: list[str] | None = None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "CONCH_REDIS_URL"}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "conch",
            "up",
            "--model-repository",
            str(repo),
            "--http-port",
            str(port),
            "--grpc-port",  # served as by default, on a port no other mesh on the machine holds
            str(free_port()),
            "--log-level",
            "WARNING",
            *(extra or []),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    for model in ("mlp", "add_sub"):
        _wait_http(f"http://127.0.0.1:{port}/v2/models/{model}/ready", 180)
    return process


def start_peer(argv: list[str], port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A peer server in a session of its own (stopped by process group), ready to answer."""
    process = subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _wait_http(f"http://127.0.0.1:{port}/v2/health/ready", 180)
    return process


def stop(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


class ProcessCpu:
    """CPU seconds of each mesh process (gateway, scheduler, workers, redis) over a window."""

    def __init__(self, processes: list[psutil.Process]):
        self.processes = processes

    @classmethod
    def for_mesh(cls, mesh: subprocess.Popen[bytes] | None) -> ProcessCpu:
        if mesh is not None:
            return cls(psutil.Process(mesh.pid).children(recursive=True))
        found = [p for p in psutil.process_iter(["cmdline"]) if _is_mesh(p.info["cmdline"] or [])]
        return cls(found)

    def snapshot(self) -> dict[int, float]:
        times: dict[int, float] = {}
        for process in self.processes:
            try:
                cpu = process.cpu_times()
                times[process.pid] = cpu.user + cpu.system
            except psutil.Error:
                continue
        return times

    def cores_since(self, before: dict[int, float], wall_s: float) -> dict[str, float]:
        after = self.snapshot()
        usage: dict[str, float] = {}
        for process in self.processes:
            if process.pid not in before or process.pid not in after:
                continue
            name = label(process)
            usage[name] = round(
                usage.get(name, 0.0) + (after[process.pid] - before[process.pid]) / wall_s, 3
            )
        return usage


def _is_mesh(cmdline: list[str]) -> bool:
    text = " ".join(cmdline)
    return (
        any(
            k in text
            for k in ("-m gateway", "-m scheduler", "-m workers", "valkey-server", "redis-server")
        )
        or "uvicorn" in text
    )


def label(process: psutil.Process) -> str:
    try:
        text = " ".join(process.cmdline())
    except psutil.Error:  # exited (a zombie until its parent reaps it) since it was listed
        return "exited"
    for key, label in (
        ("-m scheduler", "scheduler"),
        ("-m workers", "worker"),
        ("valkey-server", "redis"),
        ("redis-server", "redis"),
        ("gateway.runtime.serve", "gateway"),
        ("-m gateway", "gateway-supervisor"),
        ("multiprocessing", "gateway"),
        ("-m conch", "conch-up"),
    ):
        if key in text:
            return label
    return process.name()
