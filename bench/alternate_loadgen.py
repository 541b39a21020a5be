"""Two meshes side by side, measured in alternating ``bench.loadgen`` windows: what
``bench/alternate.sh`` does for the harness's cells, for cells ``load.sh`` cannot drive (an
ensemble has no ONNX file to build its bodies from).

    python -m bench.alternate_loadgen ROUNDS DIR_A DIR_B --repo REPO \\
        [--cells "add_sub_chain:1 add_sub_chain1:1 add_sub_chain:64 add_sub:64:chain3"]

DIR_A/DIR_B: checkouts of Conch (e.g. ``git worktree add /tmp/before main`` and ``.``), each run
with this interpreter and ``PYTHONPATH`` at its own tree. REPO: a model repository with the
cells' models (``conch bench --start --queue-delay-us 0`` leaves one in
``<bench root>/repo-delay0``). A cell is ``MODEL:CONCURRENCY[:chain3]`` (``chain3``: each client
makes three calls in a row, one measured request). One line per window: side, cell, req/s, p50,
p99, errors, the side's server CPU per request in us (all, gateway, scheduler, worker, redis: its
process tree from /proc) and its Redis commands per request (INFO commandstats, the commands
scripts run included), each net of the mesh's idle rate (measured first: at c=1 the heartbeats
and ticks of a few seconds are a large share of a few hundred requests); then the means.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import redis

from bench import loadgen, tree_cpu
from conch import http_wait
from conch.ports import free_port

INPUTS = ["INPUT0:FP32:16", "INPUT1:FP32:16"]
ROLES = ("total", *tree_cpu.ROLES)


def _start(tree: str, repo: str, port: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "CONCH_REDIS_URL"}
    env["PYTHONPATH"] = tree
    log = open(f"/tmp/conch-alternate-loadgen-{port}.log", "wb")  # noqa: SIM115 - the mesh's
    process = subprocess.Popen(
        [sys.executable, "-m", "conch", "up", "--model-repository", repo, "--http-port",
         str(port), "--grpc-port", str(free_port()), "--log-level", "WARNING"],
        cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    return process


def _redis_port(root: int) -> int:
    for child in psutil.Process(root).children(recursive=True):
        command = " ".join(child.cmdline())
        if "redis-server" in command or "valkey-server" in command:
            for conn in child.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN:
                    return int(conn.laddr.port)
    raise SystemExit(f"no Redis under process {root}")


def _commands(port: int) -> int:
    stats = redis.Redis(port=port).info("commandstats")
    return sum(int(v["calls"]) for v in stats.values())


def _idle(root: int, redis_port: int, secs: float) -> tuple[dict[str, float], float]:
    """The mesh's CPU seconds (by role) and Redis commands per second with no load: heartbeats,
    ticks and probes, which a c=1 window would otherwise charge to its few requests."""
    before, commands = tree_cpu.tree_cpu_seconds(root), _commands(redis_port)
    time.sleep(secs)
    after, commands = tree_cpu.tree_cpu_seconds(root), _commands(redis_port) - commands
    return {k: (after.get(k, 0) - before.get(k, 0)) / secs for k in ROLES}, commands / secs


def _window(
    url: str,
    root: int,
    redis_port: int,
    cell: str,
    secs: float,
    idle: tuple[dict[str, float], float],
) -> dict[str, Any]:
    model, concurrency, *rest = cell.split(":")
    conc = int(concurrency)
    repeat = 3 if rest == ["chain3"] else 1
    before, commands = tree_cpu.tree_cpu_seconds(root), _commands(redis_port)
    row = loadgen.measure(url, model, INPUTS, conc, secs, 2.0, max(1, min(4, conc // 16)),
                          repeat=repeat)  # fmt: skip
    after, commands = tree_cpu.tree_cpu_seconds(root), _commands(redis_port) - commands
    window = secs + 2.0
    served = max(1.0, row["rps"] * window)  # the warm-up's requests used CPU too
    idle_cpu, idle_commands = idle
    return {
        "cell": cell,
        "rps": row["rps"],
        "p50": row["p50_ms"],
        "p99": row["p99_ms"],
        "errors": row["errors"],
        "cpu_us": [
            round(1e6 * (after.get(k, 0) - before.get(k, 0) - idle_cpu[k] * window) / served)
            for k in ROLES
        ],
        "commands": round((commands - idle_commands * window) / served, 1),
        "load": round(os.getloadavg()[0], 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.alternate_loadgen",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("rounds", type=int)
    parser.add_argument("dir_a")
    parser.add_argument("dir_b")
    parser.add_argument("--repo", required=True)
    parser.add_argument(
        "--cells", default="add_sub_chain:1 add_sub_chain1:1 add_sub_chain:64 add_sub:64:chain3"
    )
    parser.add_argument("--secs", type=float, default=8.0)
    parser.add_argument("--idle-secs", type=float, default=10.0)
    parser.add_argument("--out", default="bench-results/alternate_loadgen.jsonl")
    args = parser.parse_args(argv)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    cells = args.cells.split()
    meshes: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    rows: list[dict[str, Any]] = []
    try:
        for side, tree in (("A", args.dir_a), ("B", args.dir_b)):
            port = free_port()
            meshes[side] = (_start(str(Path(tree).resolve()), args.repo, port), port)
        for _, port in meshes.values():
            for model in {cell.split(":")[0] for cell in cells}:
                url = f"http://127.0.0.1:{port}/v2/models/{model}/ready"
                if not http_wait.wait_ok(url, 180):
                    raise SystemExit(f"{url} did not answer 200")
        redis_ports = {side: _redis_port(p.pid) for side, (p, _) in meshes.items()}
        time.sleep(3)  # start-up's last writes settle
        idle = {
            side: _idle(p.pid, redis_ports[side], args.idle_secs) for side, (p, _) in meshes.items()
        }
        print("idle, per second: CPU s by role, commands:", idle, flush=True)
        for _ in range(args.rounds):
            for cell in cells:
                for side, (process, port) in meshes.items():
                    row = {"side": side} | _window(
                        f"http://127.0.0.1:{port}",
                        process.pid,
                        redis_ports[side],
                        cell,
                        args.secs,
                        idle[side],
                    )
                    rows.append(row)
                    with open(args.out, "a") as out:
                        out.write(json.dumps(row) + "\n")
                    print(*row.values(), flush=True)
    finally:
        for process, _ in meshes.values():
            try:
                os.killpg(process.pid, signal.SIGINT)
                process.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(process.pid, signal.SIGKILL)
    print("side cell: req/s p50 p99 | server CPU us/request: " + " ".join(ROLES) + " | commands")
    for cell in cells:
        for side in meshes:
            mine = [r for r in rows if r["cell"] == cell and r["side"] == side]
            if not mine:
                continue
            mean = {
                k: sum(r[k] for r in mine) / len(mine) for k in ("rps", "p50", "p99", "commands")
            }
            cpu = [round(sum(r["cpu_us"][i] for r in mine) / len(mine)) for i in range(len(ROLES))]
            print(f"{side} {cell}: {mean['rps']:.0f} {mean['p50']:.2f} {mean['p99']:.2f} | "
                  f"{' '.join(map(str, cpu))} | {mean['commands']:.1f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
