#!/usr/bin/env python3
"""Issue 19's big-machine cells: the TorchScript MLP served by ``conch up``, req/s by gateways.

    python scripts/big_machine.py OUT_DIR [--kind KIND_GPU|KIND_CPU] [--gateways 1,2,4,8,auto]
        [--concurrency 64,128] [--duration 10] [--warmup 3] [--clients 4]

Run by ``scripts/big_machine.sh`` (which installs what is missing and runs the ``gpu`` tests
first). For each gateway count it starts ``conch up`` on a repository of ``gpu_mlp`` (dynamic
batching) and ``gpu_mlp_nobatch`` (Triton's default scheduler), checks one answer against torch
on the CPU, measures ``gpu_mlp`` at each concurrency with ``bench.loadgen`` (and
``gpu_mlp_nobatch`` with the automatic gateway count), and appends one JSON line per cell to
``OUT_DIR/big_machine.jsonl``: req/s, latency percentiles, errors, the mesh's CPU by process
kind, the client's CPU, the average batch the worker ran.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import psutil  # noqa: E402

from bench import loadgen  # noqa: E402
from conch.ports import free_port  # noqa: E402
from shared.runtime import cpu_budget, gpu  # noqa: E402

INPUT = "INPUT__0:FP32:1024"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--kind", default="KIND_GPU", choices=["KIND_GPU", "KIND_CPU"])
    parser.add_argument("--gateways", default="1,2,4,8,auto")
    parser.add_argument("--concurrency", default="64,128")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--clients", type=int, default=max(1, (os.cpu_count() or 2) // 4))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    repo = args.out / "repo"
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "make_gpu_models.py"), str(repo),
         "--kind", args.kind],
        check=True, capture_output=True,
    )  # fmt: skip
    facts = {
        "cores": cpu_budget.available_cpus(),
        "gpus": gpu.gpu_count(),
        "auto_gateways": cpu_budget.gateway_processes("auto"),
        "kind": args.kind,
        "python": sys.version.split()[0],
    }
    results = args.out / "big_machine.jsonl"
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    for gateways in args.gateways.split(","):
        cells: list[tuple[str, int]] = [("gpu_mlp", c) for c in concurrencies]
        if gateways == "auto":
            cells += [("gpu_mlp_nobatch", c) for c in concurrencies]
        with Mesh(repo, gateways, args.out / f"mesh-{gateways}.log") as mesh:
            error = check_answer(mesh.url, repo)
            for model, concurrency in cells:
                before_cpu, before_stats = mesh.cpu(), batches(mesh.url, model)
                started = time.monotonic()
                row = loadgen.measure(mesh.url, model, [INPUT], concurrency, args.duration,
                                      args.warmup, args.clients)  # fmt: skip
                wall = time.monotonic() - started
                after_stats = batches(mesh.url, model)
                row |= facts | {
                    "gateways": gateways,
                    "gateway_processes": mesh.gateway_processes(),
                    "dynamic_batching": model == "gpu_mlp",
                    "max_abs_error_vs_cpu_torch": error,
                    "mesh_cpu": mesh.cpu_since(before_cpu, wall),
                    "avg_batch": _avg_batch(before_stats, after_stats),
                }
                with results.open("a") as out:
                    out.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)
    return 0


class Mesh:
    """``conch up`` with a number of gateway processes, stopped with Ctrl-C's signal."""

    def __init__(self, repo: Path, gateways: str, log: Path):
        self.repo, self.gateways, self.log = repo, gateways, log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Mesh:
        env = {k: v for k, v in os.environ.items() if k != "CONCH_REDIS_URL"}
        self._log = self.log.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "conch", "up", "--model-repository", str(self.repo),
             "--http-port", str(self.port), "--grpc-port", "0", "--gateways", self.gateways,
             "--log-level", "WARNING", "--ready-timeout", "240"],
            env=env, stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT,
        )  # fmt: skip
        deadline = time.monotonic() + 250
        while not self._ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"conch up did not become ready; see {self.log}")
            time.sleep(0.5)
        return self

    def _ready(self) -> bool:
        return self.log.read_bytes().find(b"Conch is ready at") >= 0

    def __exit__(self, *_exc: object) -> None:
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self._log.close()

    def _children(self) -> list[psutil.Process]:
        return psutil.Process(self.process.pid).children(recursive=True)

    def gateway_processes(self) -> int:
        return sum(1 for p in self._children() if "gateway.runtime.serve" in " ".join(p.cmdline()))

    def cpu(self) -> dict[int, tuple[str, float]]:
        seen: dict[int, tuple[str, float]] = {}
        for process in self._children():
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                seen[process.pid] = (_kind(process.cmdline()), times.user + times.system)
        return seen

    def cpu_since(self, before: dict[int, tuple[str, float]], wall_s: float) -> dict[str, float]:
        used: dict[str, float] = {}
        for pid, (kind, seconds) in self.cpu().items():
            if pid in before:
                used[kind] = round(used.get(kind, 0.0) + (seconds - before[pid][1]) / wall_s, 2)
        return used


def _kind(cmdline: list[str]) -> str:
    text = " ".join(cmdline)
    for kind in ("gateway", "scheduler", "workers", "valkey", "redis"):
        if kind in text:
            return kind
    return "other"


def check_answer(url: str, repo: Path) -> float:
    """Largest absolute difference between the mesh's answer and torch on the CPU."""
    import torch

    rng = np.random.default_rng(7)
    row = rng.standard_normal((1, 1024)).astype(np.float32)
    body = json.dumps(
        {"inputs": [{"name": "INPUT__0", "shape": [1, 1024], "datatype": "FP32",
                     "data": row.ravel().tolist()}]}
    ).encode()  # fmt: skip
    request = urllib.request.Request(
        f"{url}/v2/models/gpu_mlp/infer", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        served = np.asarray(json.load(response)["outputs"][0]["data"], dtype=np.float32)
    model = torch.jit.load(str(repo / "gpu_mlp" / "1" / "model.pt"), map_location="cpu")
    with torch.no_grad():
        expected = model(torch.from_numpy(row)).numpy().ravel()
    return float(np.max(np.abs(served - expected)))


def batches(url: str, model: str) -> tuple[int, int]:
    """(inferences, executions) from the statistics extension."""
    with urllib.request.urlopen(f"{url}/v2/models/{model}/stats", timeout=10) as response:
        stats = json.load(response)["model_stats"][0]
    return int(stats.get("inference_count", 0)), int(stats.get("execution_count", 0))


def _avg_batch(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    executions = after[1] - before[1]
    return round((after[0] - before[0]) / executions, 1) if executions else None


if __name__ == "__main__":
    sys.exit(main())
