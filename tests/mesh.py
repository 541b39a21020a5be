"""Start the mesh's services as real processes for end-to-end tests, one by one or together."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest
import redis
from redis.cluster import ClusterNode

from conch.local_prometheus import binary as prometheus_binary
from conch.ports import free_port
from shared.runtime import redis_cluster

needs_prometheus = pytest.mark.skipif(
    prometheus_binary() is None,
    reason="needs the `prometheus` binary (Debian: apt-get install -y "
    "--no-install-recommends prometheus)",
)


def start_conch_up(repository: Path, *args: str) -> subprocess.Popen[str]:
    """`conch up` as a user runs it: its own private Redis and a free gRPC port, output piped
    (stdout and stderr together) for the test to read."""
    env = {k: v for k, v in os.environ.items() if k != "CONCH_REDIS_URL"}
    argv = [sys.executable, "-m", "conch", "up", "--grpc-port", str(free_port())]
    return subprocess.Popen(
        [*argv, "--model-repository", str(repository), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )


class ConchUpOutput:
    """Lines of a child's stdout, read on a thread (select() misses lines already buffered)."""

    def __init__(self, process: subprocess.Popen[str]):
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, args=(process,), daemon=True).start()

    def _pump(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.lines.put(line)

    def wait_for(self, pattern: str, timeout_s: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            self.seen.append(line)
            if match := re.search(pattern, line):
                return match
        tail = "".join(self.seen[-40:])
        raise AssertionError(f"'{pattern}' not seen within {timeout_s} s:\n{tail}")


def stop_conch_up(
    process: subprocess.Popen[str], sig: signal.Signals = signal.SIGTERM
) -> list[psutil.Process]:
    """Stop `conch up` as a user would (SIGTERM, or SIGINT for Ctrl-C) and wait for it; returns
    the processes it had started that are still alive 10 s later (none, if it cleaned up)."""
    children = psutil.Process(process.pid).children(recursive=True)
    process.send_signal(sig)
    process.wait(timeout=60)
    _, alive = psutil.wait_procs(children, timeout=10)
    return alive


def sync_redis(url: str, **options: object) -> redis.Redis:
    """A synchronous client for a test's own look at Redis: one Redis or a cluster."""
    if url.startswith("redis+cluster"):
        nodes, parsed = redis_cluster.parse(url)
        return redis.RedisCluster(  # type: ignore[return-value]
            startup_nodes=[ClusterNode(h, p) for h, p in nodes], **parsed, **options
        )
    return redis.Redis.from_url(url, **options)  # type: ignore[arg-type]


def flush_database(url: str) -> None:
    """Start a test module from an empty Redis (the server is shared by the whole session)."""
    client = sync_redis(url)
    try:
        client.flushall()
    finally:
        client.close()


@dataclass
class Mesh:
    redis_url: str
    repository: Path
    http_port: int = field(default_factory=free_port)
    log_dir: Path | None = None
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    env_overrides: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"localhost:{self.http_port}"

    def _env(self, extra: dict[str, str]) -> dict[str, str]:
        return {
            **os.environ,
            "CONCH_REDIS_URL": self.redis_url,
            "CONCH_LOG_FORMAT": "text",
            "PYTHONUNBUFFERED": "1",
            **self.env_overrides,
            **extra,
        }

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        out = subprocess.DEVNULL
        if self.log_dir is not None:
            out = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - owned by the process
        process = subprocess.Popen(
            argv, env=self._env(env), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.processes[name] = process
        return process

    def start_scheduler(self, name: str = "scheduler", **env: str) -> None:
        self._spawn(
            name,
            [sys.executable, "-m", "scheduler"],
            {"CONCH_SCHEDULER_HEALTH_PORT": "0", **env},
        )

    def start_worker(self, name: str = "worker", backend: str = "onnxruntime", **env: str) -> None:
        self._spawn(
            name,
            [sys.executable, "-m", "workers", "--backend", backend],
            {
                "CONCH_WORKER_MODEL_REPOSITORY": str(self.repository),
                "CONCH_WORKER_HEALTH_PORT": "0",
                **env,
            },
        )

    def start_gateway(self, processes: int = 2, name: str = "gateway", **env: str) -> None:
        self._spawn(
            name,
            [sys.executable, "-m", "gateway"],
            {
                "CONCH_GATEWAY_HOST": "127.0.0.1",
                "CONCH_GATEWAY_HTTP_PORT": str(self.http_port),
                "CONCH_GATEWAY_PROCESSES": str(processes),
                **env,
            },
        )

    def start_all(self) -> Mesh:
        self.start_scheduler()
        self.start_worker()
        self.start_gateway()
        return self

    def wait_ready(self, models: list[str], timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        base = f"http://{self.url}"
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise RuntimeError(f"{name} exited with {process.returncode}: {self.log(name)}")
            try:
                ok = httpx.get(f"{base}/v2/health/ready", timeout=1).status_code == 200 and all(
                    httpx.get(f"{base}/v2/models/{m}/ready", timeout=1).status_code == 200
                    for m in models
                )
                if ok:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"mesh not ready within {timeout_s} s: {self.logs()}")

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
        process = self.processes.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        process.wait(timeout=30)

    def stop(self) -> None:
        for name in list(self.processes):
            process = self.processes[name]
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        for name in list(self.processes):
            process = self.processes.pop(name)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)

    def log(self, name: str) -> str:
        if self.log_dir is None:
            return ""
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def logs(self) -> str:
        return "\n".join(f"--- {n}\n{self.log(n)}" for n in self.processes)
