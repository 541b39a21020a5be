"""Each backend's example model through the mesh beside the same model called in-process.

    python -m bench.backends --url localhost:8000 --repository examples/model_repository \\
        --models simple,torchscript_mlp,openvino_mlp,fil_xgboost,tf_mlp

For each model: ``perf_analyzer`` (``--protocol``, HTTP by default) at concurrency 1 and 64
gives the client's throughput and p50/p99, and the statistics extension read around the c=64
run gives the batch size the dynamic batcher formed. Then the model is loaded in this process
by its own backend class (the same code a worker runs, without the mesh; a Python-based
backend's by the python backend) and called back to back for ``--seconds``: at batch 1, and at
the batch size the mesh formed. The in-process rows are the limit the mesh
approaches: the framework's own speed on this machine, one instance, one thread.

The model must see no other traffic during its runs. Inputs are random, of each input's
configured type and shape (BYTES inputs are not generated: such a model is measured through the
mesh only).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from bench import perf_analyzer
from shared.model_config import ModelConfig
from shared.storage.repositories import Repositories
from shared.wire import datatypes
from workers.backend import ModelInstance, ModelRequest
from workers.backend_table import BACKENDS, load_backend
from workers.loading import auto_complete
from workers.loading.loader import load_version, unload_instances


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.backends", description=__doc__)
    parser.add_argument("--url", default="localhost:8000", help="HOST:PORT of the HTTP endpoint")
    parser.add_argument("--grpc-url", default="localhost:8001", help="HOST:PORT of gRPC")
    parser.add_argument(
        "--protocol", choices=("http", "grpc"), default="http", help="perf_analyzer's (-i)"
    )
    parser.add_argument("--repository", type=Path, required=True)
    parser.add_argument("--models", required=True, help="comma-separated model names")
    parser.add_argument("--concurrency", default="1,64")
    parser.add_argument("--interval-ms", type=int, default=3000)
    parser.add_argument("--seconds", type=float, default=3.0, help="per in-process row")
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",")]
    print(
        "| model | backend | where | concurrency or batch | req/s (rows/s) | p50 / p99 ms | "
        "batch formed |"
    )
    print("|---|---|---|---:|---:|---|---:|")
    for model in [m for m in args.models.split(",") if m]:
        config = _get(args.url, f"/v2/models/{model}/config")
        batch = 1.0
        for concurrency in levels:
            before = _stats(args.url, model)
            url = args.url if args.protocol == "http" else args.grpc_url
            figures = perf_analyzer.run(url, model, concurrency, args.interval_ms, args.protocol)
            batch = _batch_formed(before, _stats(args.url, model))
            print(
                f"| `{model}` | {config.get('backend', '')} | mesh | c={concurrency} | "
                f"{figures.throughput:,.0f} | {figures.p50_us / 1000:.2f} / "
                f"{figures.p99_us / 1000:.2f} | {batch:.1f} |",
                flush=True,
            )
        for size in sorted({1, max(1, round(batch))}):
            try:
                rate, p50, p99 = in_process(args.repository, model, size, args.seconds)
            except BytesInput as exc:
                print(f"| `{model}` | {config.get('backend', '')} | in-process | - | {exc} | | |")
                break
            rows = f"{rate:,.0f}" if size == 1 else f"{rate:,.0f} ({rate * size:,.0f})"
            print(
                f"| `{model}` | {config.get('backend', '')} | in-process | batch {size} | {rows} "
                f"| {p50 * 1000:.2f} / {p99 * 1000:.2f} | |",
                flush=True,
            )
    return 0


def in_process(
    repository: Path, model: str, batch: int, seconds: float
) -> tuple[float, float, float]:
    """Calls per second and p50/p99 seconds of the model's own instance, called back to back."""
    scan = Repositories([str(repository)]).scan()
    if model not in scan.models:
        raise SystemExit(f"no model '{model}' in {repository}: {scan.errors.get(model, '')}")
    found = scan.models[model]
    name = found.config.backend
    backend = load_backend(name if name in BACKENDS else "python")  # else: Python-based
    found = auto_complete.complete(backend, found, strict=False)
    loaded = load_version(backend, found, max(found.versions))
    try:
        instance: ModelInstance = loaded.instances[0]
        request = ModelRequest("bench", _inputs(found.config, batch), found.config.output_names)
        for _ in range(20):
            instance.execute([request])
        took: list[float] = []
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            started = time.perf_counter()
            result = instance.execute([request]).results[0]
            took.append(time.perf_counter() - started)
            if result.error is not None:
                raise SystemExit(f"'{model}' failed in-process: {result.error.message}")
    finally:
        unload_instances(loaded)
    cuts = statistics.quantiles(took, n=100)
    return len(took) / sum(took), statistics.median(took), cuts[98]


class BytesInput(Exception):
    """The model takes BYTES: random bytes would not be a request it expects."""


def _inputs(config: ModelConfig, batch: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    inputs: dict[str, np.ndarray] = {}
    for spec in config.inputs:
        dtype = datatypes.BY_NAME[spec.datatype].dtype
        if dtype is None:
            raise BytesInput(f"input '{spec.name}' is BYTES: measured in the mesh only")
        dims = [d if d > 0 else 1 for d in spec.dims]
        shape = [batch, *dims] if config.max_batch_size > 0 else dims
        inputs[spec.name] = (rng.random(shape) * 4).astype(dtype)
    return inputs


def _batch_formed(before: dict[str, Any], after: dict[str, Any]) -> float:
    executions = after["execution_count"] - before["execution_count"]
    rows = after["inference_count"] - before["inference_count"]
    return rows / executions if executions > 0 else 0.0


def _stats(url: str, model: str) -> dict[str, Any]:
    stats = _get(url, f"/v2/models/{model}/stats")["model_stats"][0]
    return {key: int(stats[key]) for key in ("execution_count", "inference_count")}


def _get(url: str, path: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{url}{path}", timeout=10) as answer:
        return json.loads(answer.read())  # type: ignore[no-any-return]


if __name__ == "__main__":
    sys.exit(main())
