"""Sequence cells: steps of N concurrent sequences of the stateful ``sequence_accumulator``.

The model is the example repository's (ONNX, implicit state, ``direct``, 8 slots per instance),
served with two instances: 16 slots, so 16 sequences run at once rather than half of them waiting
in the backlog for a slot, as Triton's sequence batcher would make them wait too. The warmup and
the measured run drive the same sequence ids (each START restarts its sequence in place), so
the sequences a run leaves open do not hold slots the next one needs.

A cell ``sequence_accumulator:16:sequence`` runs wrk with 16 threads of one connection each
(``bench/sequence.lua``): every thread drives its own sequence, step after step, and checks each
answer against the running sum, so a wrong or lost step shows up as an error, not as speed.
The harness's ``load.sh`` posts one fixed body and cannot carry a sequence; this cell reports the
same columns (requests/s, p50/p90/p99, errors, CPU by process).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LUA = Path(__file__).resolve().parent / "sequence.lua"
MODEL = "sequence_accumulator"


def write(repo: Path) -> None:
    """The example repository's accumulator (ONNX, implicit state), built by its own script."""
    if (repo / MODEL / "1" / "model.onnx").exists():
        return
    spec = importlib.util.spec_from_file_location(
        "conch_sequence_models", ROOT / "examples" / "sequence_models.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    example = module.build_sequence_accumulator()
    (repo / MODEL / "1").mkdir(parents=True, exist_ok=True)
    (repo / MODEL / "1" / "model.onnx").write_bytes(example.onnx_model.SerializeToString())
    config = example.config_pbtxt().replace(
        "instance_group [ { count: 1 kind: KIND_CPU } ]",
        "instance_group [ { count: 2 kind: KIND_CPU } ]",
    )
    (repo / MODEL / "config.pbtxt").write_text(config)


def new_base() -> int:
    """The first sequence id of a cell: a fresh one per cell keeps cells and runs apart."""
    return random.randrange(1, 2**40)


def close(url: str, model: str, sequences: int, base: int) -> None:
    """End the sequences a run left open (wrk stops mid-sequence), so that their slots are free
    for the next cell rather than held until the idle timeout."""
    import urllib.error
    import urllib.request

    for index in range(1, sequences + 1):
        body = json.dumps(
            {
                "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [0]}],
                "parameters": {"sequence_id": base + index, "sequence_end": True},
            }
        ).encode()
        request = urllib.request.Request(
            f"{url.rstrip('/')}/v2/models/{model}/infer",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        with contextlib.suppress(urllib.error.HTTPError):  # already ended by its last step
            urllib.request.urlopen(request, timeout=30).close()


def run(
    url: str, label: str, model: str, sequences: int, seconds: int, base: int
) -> dict[str, Any]:
    """One wrk run, then its sequences ended; the row has load.sh's fields (``format`` is
    "sequence")."""
    done = subprocess.run(
        [
            "wrk",
            f"-t{sequences}",
            f"-c{sequences}",
            f"-d{seconds}s",
            "--timeout",
            "30s",
            "-s",
            str(LUA),
            f"{url.rstrip('/')}/v2/models/{model}/infer",
        ],
        env={"SEQUENCE_BASE": str(base)},
        capture_output=True,
        text=True,
        check=False,
    )
    close(url, model, sequences, base)
    lines = [line for line in done.stdout.splitlines() if line.startswith("WRKJSON ")]
    if not lines:
        raise SystemExit(f"wrk failed for the sequence cell: {done.stdout[-1000:]}{done.stderr}")
    summary = json.loads(lines[-1].split(" ", 1)[1])
    return {
        "server": label,
        "model": model,
        "concurrency": sequences,
        "format": "sequence",
        **{k: summary[k] for k in ("rps", "p50_ms", "p90_ms", "p99_ms", "errors")},
        "wrong_answers": summary["wrong_answers"],
    }
