"""What a composed model's steps cost beyond their models' own time, measured with NVIDIA's
``perf_analyzer`` (the tool Triton users run) and the statistics extension, against any KServe v2
server that has both (Conch or Triton).

    python -m bench.composed --url localhost:8000 --models add_sub_chain,mlp_ensemble,bls_pipeline

For each model, one ``perf_analyzer`` run (HTTP, concurrency ``--concurrency``, default 1) prints
the client's p50/p99, and the statistics read before and after it give each model's average
queue and compute time per request over the run. Then:

- an **ensemble**: its steps' graph comes from its configuration; the critical path is the
  longest chain of steps weighted by each step model's own time (its configured
  ``max_queue_delay_microseconds`` plus its compute). Per step, the cost beyond that is
  ``(ensemble's server time - sum over the path of (delay + compute)) / steps on the path``:
  what the composition adds, with the batchers' configured waits counted as the models' own;
- a **BLS** model (``--bls MODEL=CALLED[,CALLED...]``, e.g. ``bls_pipeline=add_sub,add_sub_chain``,
  the calls its ``execute`` makes for one request): per call, the cost beyond the called models'
  own time is ``(its compute - sum over the calls of the called model's server time per
  request) / calls``.

Both need the models to see no other traffic during the run. ``perf_analyzer`` is found in
``.conch/perf_analyzer`` (``scripts/fetch_perf_analyzer.sh``) or ``CONCH_PERF_ANALYZER_DIR``.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from dataclasses import dataclass
from typing import Any

from bench import perf_analyzer

DEFAULT_BLS = "bls_pipeline=add_sub,add_sub_chain"


@dataclass(frozen=True)
class Usage:
    """Average per request over a run, in microseconds."""

    count: int
    request_us: float
    queue_us: float
    compute_us: float


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.composed", description=__doc__)
    parser.add_argument("--url", default="localhost:8000", help="HOST:PORT of the HTTP endpoint")
    parser.add_argument("--models", default="add_sub_chain,mlp_ensemble,bls_pipeline")
    parser.add_argument("--bls", default=DEFAULT_BLS, help="MODEL=CALLED[,CALLED...]; repeatable")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--interval-ms", type=int, default=4000)
    args = parser.parse_args(argv)
    bls = dict(_bls_calls(spec) for spec in args.bls.split(";") if spec)
    rows = []
    for model in [m for m in args.models.split(",") if m]:
        config = _get(args.url, f"/v2/models/{model}/config")
        involved = _involved(args.url, model, config, bls.get(model, []))
        before = {m: _stats(args.url, m) for m in involved}
        figures = perf_analyzer.run(args.url, model, args.concurrency, args.interval_ms)
        client = (figures.p50_us, figures.p99_us)
        after = {m: _stats(args.url, m) for m in involved}
        usage = {m: _usage(before[m], after[m]) for m in involved}
        own = {m: _delay_us(args.url, m) + usage[m].compute_us for m in involved}
        if "ensemble_scheduling" in config:
            path = _critical_path(config["ensemble_scheduling"]["step"], own)
            beyond = (usage[model].request_us - sum(own[m] for m in path)) / len(path)
            what = f"{len(path)} steps on the path ({' > '.join(path)})"
        elif model in bls:
            calls = bls[model]
            called = sum(usage[m].request_us for m in calls)
            beyond = (usage[model].compute_us - called) / len(calls)
            what = f"{len(calls)} BLS calls ({', '.join(calls)})"
        else:
            beyond, what = float("nan"), "a single model"
        rows.append((model, client, usage[model], beyond, what))
    print(
        f"| model (c={args.concurrency}) | client p50 / p99 ms | server ms (queue + compute) "
        "| beyond the models' own time, per step or call | what |"
    )
    print("|---|---|---|---:|---|")
    for model, client, use, beyond, what in rows:
        print(
            f"| `{model}` | {client[0] / 1000:.2f} / {client[1] / 1000:.2f} | "
            f"{use.request_us / 1000:.2f} ({use.queue_us / 1000:.2f} + {use.compute_us / 1000:.2f})"
            f" | {beyond / 1000:.2f} ms | {what} |"
        )
    return 0


def _bls_calls(spec: str) -> tuple[str, list[str]]:
    model, _, called = spec.partition("=")
    if not model or not called:
        raise SystemExit(f"--bls {spec!r}: expected MODEL=CALLED[,CALLED...]")
    return model, called.split(",")


def _get(url: str, path: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{url}{path}", timeout=10) as answer:
        return json.loads(answer.read())  # type: ignore[no-any-return]


def _involved(url: str, model: str, config: dict[str, Any], calls: list[str]) -> list[str]:
    """The model, its steps' models (recursively) and the models its BLS calls reach."""
    found = [model]
    pending = [s["model_name"] for s in config.get("ensemble_scheduling", {}).get("step", [])]
    pending += calls
    while pending:
        name = pending.pop()
        if name in found:
            continue
        found.append(name)
        inner = _get(url, f"/v2/models/{name}/config").get("ensemble_scheduling", {})
        pending += [s["model_name"] for s in inner.get("step", [])]
    return found


def _stats(url: str, model: str) -> dict[str, Any]:
    return _get(url, f"/v2/models/{model}/stats")["model_stats"][0]["inference_stats"]  # type: ignore[no-any-return]


def _usage(before: dict[str, Any], after: dict[str, Any]) -> Usage:
    def delta(key: str, field: str = "ns") -> int:
        return int(after[key][field]) - int(before[key][field])

    count = delta("success", "count")
    if count <= 0:
        return Usage(0, 0.0, 0.0, 0.0)
    compute = delta("compute_input") + delta("compute_infer") + delta("compute_output")
    return Usage(
        count,
        delta("success") / count / 1000,
        delta("queue") / count / 1000,
        compute / count / 1000,
    )


def _delay_us(url: str, model: str) -> float:
    config = _get(url, f"/v2/models/{model}/config")
    if "ensemble_scheduling" in config:
        return 0.0
    return float(config.get("dynamic_batching", {}).get("max_queue_delay_microseconds", 0) or 0)


def _critical_path(steps: list[dict[str, Any]], own: dict[str, float]) -> list[str]:
    """The longest chain of steps (a step after the steps that produce its inputs)."""
    producer = {
        tensor: index for index, step in enumerate(steps) for tensor in step["output_map"].values()
    }
    best: dict[int, tuple[float, list[str]]] = {}

    def longest(index: int) -> tuple[float, list[str]]:
        if index not in best:
            step = steps[index]
            before = [producer[t] for t in step["input_map"].values() if t in producer]
            prior = max((longest(i) for i in before), default=(0.0, []), key=lambda p: p[0])
            name = step["model_name"]
            best[index] = (prior[0] + own.get(name, 0.0), [*prior[1], name])
        return best[index]

    return max((longest(i) for i in range(len(steps))), key=lambda p: p[0])[1]


if __name__ == "__main__":
    sys.exit(main())
