"""Generative throughput: continuous batching against the same engine without it.

    conch bench generative [--requests 32] [--tokens 64] [--threads 1] [--arrival-ms 0]
    conch bench generative --url http://127.0.0.1:8000     (through the mesh, streamed)
    conch bench generative --url http://127.0.0.1:8000 --cpu-of <pid of conch up>

In process (the default): the example tiny GPT (``examples/make_generative_models.py``, trained
once into ``--model-dir``), ``--requests`` generations of ``--tokens`` tokens submitted at once
to the engine in each mode — ``continuous`` (iteration-level batching), ``static-1`` (one
request at a time: a decoupled model without an engine) and ``static-N`` (a fixed batch of N
that no request joins until it is done) — on the engine's own thread, as the model serves them.
Through the mesh (``--url``): the same number of concurrent ``/generate_stream`` requests to
``tiny_gpt`` (continuous) and ``tiny_gpt_static`` (``batching: static``), which the example
script writes with ``--name tiny_gpt_static --batching static``. With ``--cpu-of``, the CPU
seconds the mesh's processes used for each mode too (tokens per CPU second: the measure a
shared machine does not blur).

Reported per mode: tokens/s (all tokens over the wall time from the first submission to the
last token), time to first token p50/p99, inter-token latency p50/p99. Markdown on stdout, one
JSON line per row into ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.tree_cpu import tree_cpu_seconds

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = [
    "The harbour ",
    "A shell on the sand ",
    "The lighthouse keeper ",
    "Ask a question ",
    "The baker opens ",
    "In the winter ",
    "Every story ",
    "The boats go out, ",
]


@dataclass
class Timeline:
    submitted: float
    tokens: list[float] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def summarize(mode: str, timelines: list[Timeline], started: float) -> dict[str, Any]:
    tokens = sum(len(t.tokens) for t in timelines)
    ended = max(t.tokens[-1] for t in timelines if t.tokens)
    ttft = [t.tokens[0] - t.submitted for t in timelines if t.tokens]
    gaps = [b - a for t in timelines for a, b in zip(t.tokens, t.tokens[1:], strict=False)]
    return {
        "mode": mode,
        "requests": len(timelines),
        "tokens": tokens,
        "seconds": round(ended - started, 3),
        "tokens_per_s": round(tokens / (ended - started), 1),
        "ttft_p50_ms": round(percentile(ttft, 0.5) * 1e3, 2),
        "ttft_p99_ms": round(percentile(ttft, 0.99) * 1e3, 2),
        "itl_p50_ms": round(percentile(gaps, 0.5) * 1e3, 2),
        "itl_p99_ms": round(percentile(gaps, 0.99) * 1e3, 2),
    }


def ensure_model(model_dir: Path) -> Path:
    """The example model, trained once (deterministic) into ``model_dir``."""
    version = model_dir / "tiny_gpt" / "1"
    if not (version / "weights.pt").is_file():
        script = ROOT / "examples" / "make_generative_models.py"
        subprocess.run([sys.executable, str(script), str(model_dir)], check=True)
    return version


def run_in_process(
    version: Path, mode: str, requests: int, tokens: int, batch: int, arrival_ms: float = 0.0
) -> dict[str, Any]:
    """All requests submitted before the engine starts (they arrive together), or one every
    ``arrival_ms`` while it runs."""
    from workers.generative import checkpoint
    from workers.generative.engine import Engine
    from workers.generative.events import Generation
    from workers.generative.loop import EngineLoop
    from workers.generative.params import SamplingParams

    model, vocab = checkpoint.load(version)
    batching = "continuous" if mode == "continuous" else "static"
    engine = Engine(
        model, vocab, max_sequences=requests, batching=batching, static_batch_size=batch
    )
    # A warm-up generation: the first forward pays for allocations the rest do not.
    params = SamplingParams(max_tokens=4, temperature=0)
    engine.submit(Generation("warm", "x", params, lambda event: None))
    while engine.has_work():
        engine.step()
    timelines = []
    loop = EngineLoop(engine)
    if arrival_ms:
        loop.start()
    started = time.perf_counter()
    for i in range(requests):
        if arrival_ms and i:
            time.sleep(arrival_ms / 1e3)
        timeline = Timeline(time.perf_counter())

        def emit(event: Any, timeline: Timeline = timeline) -> None:
            if event.token_id is not None:
                timeline.tokens.append(time.perf_counter())
            if event.finished:
                timeline.done.set()

        params = SamplingParams(max_tokens=tokens, temperature=0)
        prompt = PROMPTS[i % len(PROMPTS)]
        engine.submit(Generation(f"r{i}", prompt, params, emit, submitted=timeline.submitted))
        timelines.append(timeline)
    if not arrival_ms:
        loop.start()  # all requests are in: they arrived together
    for timeline in timelines:
        timeline.done.wait(600)
    loop.stop()
    return summarize(mode, timelines, started)


async def _stream_one(client: Any, url: str, model: str, i: int, tokens: int) -> Timeline:
    body = {
        "text_input": PROMPTS[i % len(PROMPTS)],
        "parameters": {"stream": True, "max_tokens": tokens, "temperature": 0},
    }
    timeline = Timeline(time.perf_counter())
    async with client.stream(
        "POST", f"{url}/v2/models/{model}/generate_stream", json=body
    ) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{model}: {response.status_code} {await response.aread()!r}")
        async for line in response.aiter_lines():
            if line.startswith("data: ") and "text_output" in line:
                timeline.tokens.append(time.perf_counter())
    return timeline


async def run_mesh(
    url: str, model: str, requests: int, tokens: int, cpu_of: int | None = None
) -> dict[str, Any]:
    import httpx

    limits = httpx.Limits(max_connections=requests + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        await _stream_one(client, url, model, 0, 4)  # warm-up
        cpu = tree_cpu_seconds(cpu_of)["total"] if cpu_of else 0.0
        started = time.perf_counter()
        timelines = await asyncio.gather(
            *(_stream_one(client, url, model, i, tokens) for i in range(requests))
        )
        cpu = tree_cpu_seconds(cpu_of)["total"] - cpu if cpu_of else 0.0
    row = summarize(f"mesh {model}", list(timelines), started)
    if cpu_of:
        row["mesh_cpu_s"] = round(cpu, 2)
        row["tokens_per_cpu_s"] = round(row["tokens"] / max(cpu, 0.01), 1)
    return row


def markdown(rows: list[dict[str, Any]]) -> str:
    head = "| mode | tokens/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | s |"
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['mode']} | {r['tokens_per_s']} | {r['ttft_p50_ms']} | {r['ttft_p99_ms']} | "
            f"{r['itl_p50_ms']} | {r['itl_p99_ms']} | {r['seconds']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="conch bench generative",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--url", help="a running mesh serving tiny_gpt and tiny_gpt_static")
    parser.add_argument(
        "--cpu-of",
        type=int,
        help="with --url: the pid of `conch up` (the mesh on this machine): also report the CPU "
        "seconds its processes used per mode, and tokens per CPU second",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="with --url: alternate the two models this many times (a window is about a second "
        "on this machine; the ratio is reported per round and as the median)",
    )
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (in process)")
    parser.add_argument(
        "--arrival-ms", type=float, default=0.0, help="in process: one request every N ms"
    )
    parser.add_argument("--model-dir", type=Path, default=Path("/tmp/conch-bench/generative"))
    parser.add_argument("--out", type=Path, help="append one JSON line per row")
    args = parser.parse_args(argv)
    rows = []
    if args.url:
        return _mesh_rounds(args)
    else:
        import torch

        torch.set_num_threads(args.threads)
        version = ensure_model(args.model_dir)
        modes = [("continuous", 1), ("static-1", 1), (f"static-{args.requests}", args.requests)]
        for mode, batch in modes:
            rows.append(
                run_in_process(version, mode, args.requests, args.tokens, batch, args.arrival_ms)
            )
    base = rows[0]["tokens_per_s"]
    for row in rows:
        row["speedup_of_continuous"] = round(base / row["tokens_per_s"], 2)
    print(markdown(rows))
    for row in rows[1:]:
        print(f"continuous / {row['mode']}: {row['speedup_of_continuous']}x tokens/s")
    if all("tokens_per_cpu_s" in row for row in rows):
        per_cpu = ", ".join(f"{r['mode']} {r['tokens_per_cpu_s']}" for r in rows)
        ratio = rows[0]["tokens_per_cpu_s"] / rows[-1]["tokens_per_cpu_s"]
        print(f"tokens per CPU second of the mesh: {per_cpu} ({ratio:.2f}x)")
    _append_rows(args.out, rows)
    return 0


def _mesh_rounds(args: argparse.Namespace) -> int:
    """Both models in alternating windows, so that the machine's drift falls on both."""
    rows, ratios = [], []
    for round_ in range(1, max(1, args.rounds) + 1):
        pair = []
        for model in ("tiny_gpt", "tiny_gpt_static"):
            row = asyncio.run(run_mesh(args.url, model, args.requests, args.tokens, args.cpu_of))
            row["round"] = round_
            pair.append(row)
        ratios.append(round(pair[0]["tokens_per_s"] / pair[1]["tokens_per_s"], 2))
        rows += pair
    print(markdown(rows))
    print(f"continuous / static tokens/s per round: {ratios}; median {statistics.median(ratios)}x")
    if all("tokens_per_cpu_s" in row for row in rows):
        per_cpu = [
            round(a["tokens_per_cpu_s"] / b["tokens_per_cpu_s"], 2)
            for a, b in zip(rows[::2], rows[1::2], strict=True)
        ]
        print(f"tokens per CPU second of the mesh, ratio per round: {per_cpu}")
    _append_rows(args.out, rows)
    return 0


def _append_rows(path: Path | None, rows: list[dict[str, Any]]) -> None:
    """One JSON line per row, appended to ``--out`` (when given)."""
    if path:
        with path.open("a") as out:
            for row in rows:
                out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
