"""Ensemble cells: what an ensemble's steps cost, beside a client that calls the models itself.

- ``add_sub_chain:64`` — the example repository's ensemble of three ``add_sub`` steps, one
  request per answer (the steps go through ``add_sub``'s queue and batcher, their tensors
  through Redis, never through the gateway).
- ``add_sub:64:chain3`` — the same three calls made by the client, one after another on its
  connection: what a user without ensembles does. One "request" is the three round trips.
- ``add_sub_chain1:1`` — a one-step ensemble: at c=1, (p50 of 3 steps - p50 of 1 step) / 2 is
  the cost of one more step.

``add_sub`` costs next to nothing, so these cells measure the mesh. The harness's ``load.sh``
builds its request bodies from an ONNX file and an ensemble has none: these cells use
``bench.loadgen`` (binary tensor extension, closed loop like ``wrk -cN``, latency per request
or per chain of requests).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from bench.cells import Cell

ROOT = Path(__file__).resolve().parent.parent
# Ensemble name -> its number of add_sub steps.
NAMES = {"add_sub_chain": 3, "add_sub_chain1": 1}
INPUTS = ["INPUT0:FP32:16", "INPUT1:FP32:16"]


def write(repo: Path) -> None:
    """The chains, built by the example repository's own script (``add_sub`` is the harness's)."""
    spec = importlib.util.spec_from_file_location(
        "conch_ensemble_models", ROOT / "examples" / "ensemble_models.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    for name, steps in NAMES.items():
        example = module.build_add_sub_chain(steps, name)
        (repo / name / "1").mkdir(parents=True, exist_ok=True)
        (repo / name / "config.pbtxt").write_text(example.config_pbtxt())


def wanted(cell: Cell) -> bool:
    return cell.model in NAMES or cell.chain > 0


def run(url: str, label: str, cell: Cell, duration: float, warmup: float) -> dict[str, Any]:
    from bench import loadgen
    from conch import http_wait

    if not http_wait.wait_ok(f"{url}/v2/models/{cell.model}/ready", 120):
        raise SystemExit(f"model {cell.model} is not ready at {url}")
    processes = max(1, min(4, cell.concurrency // 16))
    row = loadgen.measure(
        url,
        cell.model,
        INPUTS,
        cell.concurrency,
        duration,
        warmup,
        processes,
        repeat=max(cell.chain, 1),
    )
    row["server"] = label
    row["format"] = f"binary chain of {cell.chain} calls" if cell.chain else "binary"
    return row
