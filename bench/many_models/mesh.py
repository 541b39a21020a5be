"""The mesh a run measures: ``conch up``'s command line for each mode, its start and stop, and
what is watched while the load runs (the workers' memory, the repository index's READY models,
the workers' load counters).

``on_demand`` starts every model unloaded, with a memory budget per worker; ``warm`` is the
issue's baseline: explicit model control with the hottest models loaded at start
(``--load-model``, on every worker), and the mix cut to them.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from bench.many_models.repository import model_name
from bench.many_models.timeline import IndexSample
from conch.http_wait import get

MODES = ("on_demand", "warm")
_MODEL = re.compile(r"m(\d+)$")


@dataclass(frozen=True)
class MeshPlan:
    mode: str
    repo: Path
    workers: int
    pinned: int  # the hottest models loaded at start (--load-model)
    budget: str  # --model-memory-budget (on_demand)
    http_port: int
    grpc_port: int
    admin_token: str
    up_args: tuple[str, ...] = ()  # more conch up flags, as given


def up_argv(plan: MeshPlan) -> list[str]:
    """``conch up``'s arguments for the plan's mode."""
    argv = [
        sys.executable, "-m", "conch", "up", "--model-repository", str(plan.repo),
        "--http-port", str(plan.http_port), "--grpc-port", str(plan.grpc_port),
        "--workers-per-backend", str(plan.workers), "--admin-token", plan.admin_token,
        "--log-level", "WARNING", "--ready-timeout", "900",
    ]  # fmt: skip
    if plan.mode == "warm":
        argv += ["--model-control-mode", "explicit"]
    elif plan.mode == "on_demand":
        argv += ["--model-control-mode", "on_demand", "--model-memory-budget", plan.budget]
    else:
        raise ValueError(f"mode {plan.mode!r}: expected one of {', '.join(MODES)}")
    for rank in range(plan.pinned):
        argv += ["--load-model", model_name(rank)]
    return argv + list(plan.up_args)


def start(plan: MeshPlan, log: Path) -> subprocess.Popen[bytes]:
    """``conch up`` in a session of its own (its private Redis, not the caller's)."""
    env = {k: v for k, v in os.environ.items() if k != "CONCH_REDIS_URL"}
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        return subprocess.Popen(
            up_argv(plan), env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=60)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def index_ready(
    url: str, token: str, ready_only: bool = True, timeout_s: float = 5.0
) -> tuple[set[int], int]:
    """The model ranks the repository index lists READY, and how many entries it lists (all of
    them with ``ready_only`` false: the repository's models)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout_s)
    try:
        conn.request(
            "POST", "/v2/repository/index", body=json.dumps({"ready": ready_only}).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )  # fmt: skip
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    if response.status != 200:
        raise OSError(f"repository index answered {response.status}: {body[:200]!r}")
    entries = json.loads(body)
    ready = set()
    for entry in entries:
        found = _MODEL.match(entry.get("name", ""))
        if found and entry.get("state") == "READY":
            ready.add(int(found.group(1)))
    return ready, len(entries)


def wait_ready(
    process: subprocess.Popen[bytes], url: str, plan: MeshPlan, models: int, timeout_s: float
) -> None:
    """Until the gateway is live, the pinned models are ready and (on_demand) the index lists
    every model; raises SystemExit naming what was missing."""
    deadline = time.monotonic() + timeout_s
    missing = "the gateway did not answer"
    pinned = [model_name(r) for r in range(plan.pinned)]
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"conch up exited with {process.returncode} before it was ready")
        with contextlib.suppress(OSError, http.client.HTTPException, ValueError):
            missing = _missing(url, plan, pinned, models)
            if not missing:
                return
        time.sleep(0.5)
    raise SystemExit(f"the mesh was not ready within {timeout_s:.0f} s: {missing}")


def _missing(url: str, plan: MeshPlan, pinned: list[str], models: int) -> str:
    """What the mesh still lacks before the run may start ("" when nothing)."""
    if get(f"{url}/v2/health/live", 2)[0] != 200:
        return "the gateway is not live"
    waiting = [m for m in pinned if get(f"{url}/v2/models/{m}/ready", 2)[0] != 200]
    if waiting:
        return f"{len(waiting)} pinned models not ready ({', '.join(waiting[:5])}...)"
    if plan.mode == "on_demand":
        listed = index_ready(url, plan.admin_token, ready_only=False)[1]
        if listed < models:
            return f"the repository index lists {listed} of {models} models"
    return ""


def worker_processes(root: int) -> list[psutil.Process]:
    """``conch up``'s worker processes and whatever they started."""
    found: list[psutil.Process] = []
    for child in psutil.Process(root).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "-m workers" in " ".join(child.cmdline()):
                found.append(child)
                found.extend(child.children(recursive=True))
    return found


def server_loads(root: int) -> float | None:
    """The sum of ``conch_model_loads_total`` over the workers' /metrics; None where no worker
    exports it (main before on_demand mode)."""
    total, seen = 0.0, False
    for process in worker_processes(root):
        with contextlib.suppress(psutil.Error):
            for conn in process.net_connections(kind="tcp"):
                if conn.status != psutil.CONN_LISTEN:
                    continue
                with contextlib.suppress(OSError, http.client.HTTPException):
                    status, body = get(f"http://127.0.0.1:{conn.laddr.port}/metrics", 5)
                    if status != 200:
                        continue
                    for line in body.decode(errors="replace").splitlines():
                        if line.startswith("# HELP conch_model_loads"):  # exported, maybe 0
                            seen = True
                        if line.startswith("conch_model_loads_total"):
                            total += float(line.rsplit(" ", 1)[1])
    return total if seen else None


class Watch:
    """A thread sampling the workers' summed RSS and the index's READY models during the run."""

    def __init__(self, root: int, url: str, token: str, every_s: float, index: bool):
        self.root, self.url, self.token, self.every_s, self.index = root, url, token, every_s, index
        self.memory: list[tuple[float, int]] = []  # (monotonic s, bytes)
        self.samples: list[IndexSample] = []
        self.index_errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="many-models-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def peak_rss(self) -> int:
        return max((rss for _, rss in self.memory), default=0)

    def _run(self) -> None:
        processes: list[psutil.Process] = []
        listed_at = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            if now - listed_at > 2.0:  # a worker restarted: its new process counts too
                with contextlib.suppress(psutil.Error):
                    processes, listed_at = worker_processes(self.root), now
            rss = 0
            for process in processes:
                with contextlib.suppress(psutil.Error):
                    rss += process.memory_info().rss
            self.memory.append((now, rss))
            if self.index:
                try:
                    ready, _ = index_ready(self.url, self.token)
                    self.samples.append(IndexSample((now + time.monotonic()) / 2, frozenset(ready)))
                except (OSError, http.client.HTTPException, ValueError):
                    self.index_errors += 1
            self._stop.wait(max(0.0, self.every_s - (time.monotonic() - now)))
