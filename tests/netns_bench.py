"""Cross-host figures: `conch bench` cells through Envoy, with 0, 0.1 and 0.5 ms per hop.

    sudo .venv/bin/python -m tests.netns_bench [--delays 0,0.1,0.5] [--cells mlp:1,mlp:64]
        [--duration 10] [--harness bench/harness] [--out bench-results/cross-host.jsonl]

Builds the mesh across network namespaces (``tests.netns_mesh``) on the harness's model
repository, then, in the same run, runs ``conch bench --url <edge>`` from the client's namespace
for each delay, and prints one table (Markdown) with every row; rows are appended as JSON lines
to ``--out`` with ``delay_ms`` added. Needs root and iproute2 (``tests.netns_lab.missing``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from bench import HARNESS
from tests import netns_lab
from tests.netns_mesh import ROOT, NetMesh


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delays", default="0,0.1,0.5")
    parser.add_argument("--cells", default="mlp:1,mlp:64")
    parser.add_argument("--duration", default="10")
    parser.add_argument("--harness", type=Path, default=HARNESS)
    parser.add_argument("--bench-root", default=os.environ.get("BENCH_ROOT", "/tmp/conch-bench"))
    parser.add_argument("--out", type=Path, default=Path("bench-results/cross-host.jsonl"))
    args = parser.parse_args(argv)
    reason = netns_lab.missing()
    if reason:
        print(f"netns_bench: {reason}", file=sys.stderr)
        return 2
    repo = Path(args.bench_root) / "repo"
    if not (repo / "mlp").exists():
        print(
            f"netns_bench: no {repo}/mlp: run `conch bench --start --cells mlp:1` once",
            file=sys.stderr,
        )
        return 2
    logs = Path(tempfile.mkdtemp(prefix="conch-netns-bench-"))
    mesh = NetMesh(repo, logs)
    rows: list[dict[str, object]] = []
    try:
        mesh.start()
        mesh.wait_ready(["mlp"])
        for delay in (float(d) for d in args.delays.split(",")):
            mesh.set_delay(delay)
            out = logs / f"cells-{delay}.jsonl"
            bench = [
                sys.executable, "-m", "bench", "--url", mesh.url, "--cells", args.cells,
                "--duration", args.duration, "--harness", str(args.harness),
                "--bench-root", args.bench_root, "--out", str(out),
            ]  # fmt: skip
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            mesh.lab.run("client", bench, env, timeout=600)
            for line in out.read_text().splitlines():
                row = json.loads(line)
                row["delay_ms"] = delay
                rows.append(row)
    finally:
        mesh.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as sink:
        for row in rows:
            sink.write(json.dumps(row) + "\n")
    keys = ["delay_ms", "model", "concurrency", "rps", "p50_ms", "p90_ms", "p99_ms", "errors"]
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(str(row.get(k, "")) for k in keys) + " |")
    print(f"logs: {logs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
