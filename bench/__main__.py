"""Run the benchmark harness's cells against a Conch mesh, optionally beside the tuned peer.

    python -m bench [--url URL | --start] [--peer] [--cells mlp:1,mlp:64,...] [--duration 10]

``--start`` runs ``conch up`` on the harness's model repository (a private Redis, the default
process layout) and stops it afterwards; ``--url`` targets a mesh that is already running.
``--peer`` also starts the harness's tuned MLServer (inference in the HTTP process, one ONNX
Runtime thread, httptools, metrics off) and measures the same cells in the same run.
Each cell is one ``load.sh`` run (wrk, the same request bytes for every server, the answer
checked against onnxruntime in-process first). Conch's cells add the average batch size (from
the statistics extension) and the CPU each process of the mesh used. Prints a Markdown table
and writes every row as a JSON line to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from bench import HARNESS, ensembles, idle, peers, sequences
from bench.cell_run import run_cell
from bench.cells import Cell, parse_cells
from bench.models import NAMES
from bench.models import write as write_memory_bound
from bench.processes import ProcessCpu, label, start_mesh, start_peer, stop
from bench.report import markdown_table, same_run_ratios


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "generative":  # conch bench generative: streaming generation
        from bench import generative

        return generative.main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="conch bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--harness",
        type=Path,
        default=HARNESS,
        help="the benchmark harness (default: the project's copy, bench/harness)",
    )
    parser.add_argument("--bench-root", default=os.environ.get("BENCH_ROOT", "/tmp/conch-bench"))
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--url", help="a running mesh, e.g. http://127.0.0.1:8000")
    target.add_argument("--start", action="store_true", help="start conch up for the run")
    parser.add_argument("--port", type=int, default=8000, help="port for --start")
    parser.add_argument(
        "--peer", action="store_true", help="measure the tuned MLServer too (= --peers mlserver)"
    )
    parser.add_argument(
        "--peers",
        default="",
        help="peers to measure in the same run, e.g. mlserver,ray (each cell against the "
        "peer's best configuration for it: bench/peers.py)",
    )
    parser.add_argument("--peer-port", type=int, default=8080)
    parser.add_argument("--cells", default="mlp:1,mlp:64,add_sub:1,add_sub:64,mlp:64:binary")
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument(
        "--queue-delay-us",
        type=int,
        help="serve Conch's copy of the models with this max_queue_delay_microseconds",
    )
    parser.add_argument(
        "--cache-size",
        help="with --start, a response cache of this size (conch up --cache-config "
        "local,size=SIZE); a cell's model NAME_cached is NAME with response_cache enabled",
    )
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=20.0,
        help="with --start, measure the idle mesh's CPU and wake-ups this long first (0: skip)",
    )
    parser.add_argument("--out", type=Path, default=Path("bench-results/results.jsonl"))
    args = parser.parse_args(argv)

    load_sh = args.harness / "load.sh"
    if not load_sh.exists():
        print(
            f"conch bench: no harness at {args.harness} (expected load.sh there)", file=sys.stderr
        )
        return 2
    env = {**os.environ, "BENCH_ROOT": args.bench_root}
    bench_py = Path(args.bench_root) / "bench-venv" / "bin" / "python"
    if not bench_py.exists():
        print(
            f"conch bench: run `bash {args.harness}/setup.sh` first ({bench_py} is missing)",
            file=sys.stderr,
        )
        return 2
    repo = Path(args.bench_root) / "repo"
    subprocess.run(
        [str(bench_py), str(args.harness / "make_models.py"), str(repo)],
        check=True,
        env=env,
        capture_output=True,
    )
    cells = parse_cells(args.cells)
    peer_names = peers.parse_peers(args.peers or ("mlserver" if args.peer else ""))
    for peer in peer_names:
        problem = peers.missing_install(peer, Path(args.bench_root), args.harness)
        if problem:
            print(f"conch bench: {problem}", file=sys.stderr)
            return 2
    if any(cell.model in NAMES for cell in cells):
        write_memory_bound(repo)
    if any(cell.sequence for cell in cells):
        sequences.write(repo)
    if any(ensembles.wanted(cell) for cell in cells):
        ensembles.write(repo)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []

    def record(row: dict[str, Any]) -> dict[str, Any]:
        """Each row is written as soon as it is measured: a later failure loses nothing."""
        with args.out.open("a") as out:
            out.write(json.dumps(row) + "\n")
        return row

    idle_line = ""

    for peer in peer_names:
        rows.extend(_run_peer(peer, cells, load_sh, args, env, record))

    served = repo if args.queue_delay_us is None else _with_delay(repo, args.queue_delay_us)
    _add_cached_copies(served, cells)
    extra = ["--cache-config", f"local,size={args.cache_size}"] if args.cache_size else []
    mesh = start_mesh(served, args.port, extra) if args.start else None
    url = args.url or f"http://127.0.0.1:{args.port}"
    try:
        cpu = ProcessCpu.for_mesh(mesh)
        if mesh is not None and args.idle_seconds > 0:
            time.sleep(2)  # start-up's last writes settle
            whole = [psutil.Process(mesh.pid), *cpu.processes]
            cost = idle.measure(whole, label, args.idle_seconds)
            print(cost.line(), flush=True)
            idle_line = cost.line()
            record(cost.row())
        for cell in cells:
            rows.append(record(run_cell(load_sh, url, "conch", cell, args, env, cpu)))
    finally:
        if mesh is not None:
            stop(mesh)
    print(markdown_table(rows))
    comparison = same_run_ratios(rows)
    if comparison:
        print(f"\n{comparison}")
    if idle_line:
        print(f"\n{idle_line}")
    print(f"\n{len(rows)} rows appended to {args.out}")
    return 0


def _run_peer(
    peer: str,
    cells: list[Cell],
    load_sh: Path,
    args: argparse.Namespace,
    env: dict[str, str],
    record: Callable[[dict[str, Any]], dict[str, Any]],
) -> list[dict[str, Any]]:
    """The peer's cells, one server start per configuration, its own processes' CPU counted."""
    rows = []
    for config, served in peers.grouped(
        peer, cells, args.harness, args.peer_port, Path(args.bench_root)
    ):
        server = start_peer(config.argv, args.peer_port, peers.env_for(config, env))
        try:
            meter = peers.TreeCpu(server.pid)
            url = f"http://127.0.0.1:{args.peer_port}"
            for cell in served:
                rows.append(record(run_cell(load_sh, url, config.label, cell, args, env, meter)))
        finally:
            stop(server)
    return rows


def _with_delay(repo: Path, delay_us: int) -> Path:
    """A copy of the repository whose dynamic batchers wait at most ``delay_us``."""
    import re
    import shutil

    target = repo.with_name(f"{repo.name}-delay{delay_us}")
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(repo, target)
    for config in target.glob("*/config.pbtxt"):
        text = re.sub(
            r"max_queue_delay_microseconds: \d+",
            f"max_queue_delay_microseconds: {delay_us}",
            config.read_text(),
        )
        config.write_text(text)
    return target


def _add_cached_copies(repo: Path, cells: list[Cell]) -> None:
    """``NAME_cached``: a copy of model NAME with Triton's response cache enabled."""
    import shutil

    for cell in cells:
        base = cell.model.removesuffix("_cached")
        if cell.model == base or not (repo / base).is_dir():
            continue
        target = repo / cell.model
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(repo / base, target)
        config = target / "config.pbtxt"
        text = config.read_text().replace(f'name: "{base}"', f'name: "{cell.model}"')
        config.write_text(text + "\nresponse_cache { enable: true }\n")


if __name__ == "__main__":
    raise SystemExit(main())
