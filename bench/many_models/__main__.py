"""Entry point of ``python -m bench.many_models``: parse the flags, write the repository, run
each mode, print the table and write the raw numbers."""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.many_models import __doc__ as _usage
from bench.many_models import repository
from bench.many_models.report import markdown_table
from bench.many_models.run import RunSettings, run_mode
from bench.many_models.zipf import EXPONENT


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.many_models",
        description=_usage,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add("--mode", choices=("on_demand", "warm", "both"), default="both")
    add("--models", type=int, default=1000, help="models in the repository (default 1000)")
    add("--hot", type=int, default=50, help="warm: the hottest models pre-loaded and requested")
    add("--pin", type=int, default=0, help="on_demand: the hottest models pinned (--load-model)")
    add("--workers", type=int, default=2, help="worker processes (--workers-per-backend)")
    add("--model-memory-budget", default="40MiB", help="on_demand: each worker's budget "
        "(default: 50 of these models, each ~0.78 MiB of a worker's RSS when loaded)")  # fmt: skip
    add("--concurrency", type=int, default=32, help="closed-loop connections")
    add("--processes", type=int, default=1, help="client processes the connections share")
    add("--duration", type=float, default=60.0, help="seconds of load per mode")
    add("--seed", type=int, default=20261128, help="the mix's seed")
    add("--zipf-s", type=float, default=EXPONENT, help="the Zipf exponent (default 1.1)")
    add("--request-timeout", type=float, default=60.0, help="seconds before a request is lost")
    add("--queue-delay-us", type=int, default=0, help="max_queue_delay_microseconds")
    add("--sample-every", type=float, default=0.5, help="seconds between memory/index samples")
    add("--no-index-watch", action="store_true", help="do not poll the repository index")
    add("--up-arg", action="append", default=[], metavar="FLAG", help="more conch up flags "
        "(repeatable; --up-arg=--model-idle-unload-seconds=60)")  # fmt: skip
    add("--repo", type=Path, help="where the models are (default /tmp/conch-bench/many-models-N)")
    add("--out-dir", type=Path, default=Path("bench-results"))
    add("--generate-only", action="store_true", help="write the repository and stop")
    add("--report", nargs="+", type=Path, metavar="JSON", help="only print the table of runs")
    return parser


def _table_from(paths: list[Path]) -> str:
    runs: list[dict[str, Any]] = []
    for path in paths:
        data = json.loads(path.read_text())
        runs.extend(data["runs"])
    return markdown_table(runs)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.report:
        print(_table_from(args.report))
        return 0
    repo = args.repo or Path(f"/tmp/conch-bench/many-models-{args.models}")
    began = time.monotonic()
    written = repository.write(repo, args.models, args.queue_delay_us)
    print(f"repository {repo}: {args.models} models ({written} written in "
          f"{time.monotonic() - began:.1f} s)", flush=True)  # fmt: skip
    if args.generate_only:
        return 0
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    modes = ["on_demand", "warm"] if args.mode == "both" else [args.mode]
    runs: list[dict[str, Any]] = []
    failed: dict[str, str] = {}
    for mode in modes:
        settings = RunSettings(
            mode=mode, repo=repo, models=args.models, hot=args.hot, pinned=args.pin,
            workers=args.workers, budget=args.model_memory_budget,
            concurrency=args.concurrency, processes=args.processes, duration_s=args.duration,
            seed=args.seed, s=args.zipf_s, request_timeout_s=args.request_timeout,
            sample_every_s=args.sample_every, watch_index=not args.no_index_watch,
            up_args=tuple(args.up_arg), log_dir=args.out_dir,
        )  # fmt: skip
        try:
            runs.append(run_mode(settings))
        except SystemExit as stopped:  # the mesh did not start (e.g. a mode main lacks)
            failed[mode] = str(stopped)
            print(f"{mode}: {stopped}", file=sys.stderr, flush=True)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = args.out_dir / f"many_models-{stamp}.json"
    out.write_text(json.dumps({"stamp": stamp, "runs": runs, "failed": failed}))
    if runs:
        table = markdown_table(runs)
        out.with_suffix(".md").write_text(table + "\n")
        print(table)
    print(f"raw numbers: {out}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
