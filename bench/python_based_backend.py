"""The wordcount Python-based backend called in process, the baseline of its perf_analyzer runs.

    python -m bench.python_based_backend REPO [--batch 1 --batch 5] [--seconds 3]

Loads ``examples/backends/wordcount/model.py`` with Conch's ``triton_python_backend_utils`` the way
the model process does (``get_model_dir()`` -> ``REPO/wordcount/1``) and calls its ``execute``
with N requests of one random 32-character string each (what perf_analyzer sends), for a few
seconds per batch size: rows per second and the p50/p99 of one ``execute`` call. No mesh, no
process boundary, no Redis: what the backend itself costs.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import string
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from workers.python.stub import UTILS_DIR

ROOT = Path(__file__).resolve().parents[1]
BACKEND = ROOT / "examples" / "backends" / "wordcount" / "model.py"


def load(model_dir: Path) -> tuple[Any, Any]:
    """(pb_utils, an initialized TritonPythonModel) of the wordcount backend."""
    sys.path.insert(0, UTILS_DIR)
    import triton_python_backend_utils as pb_utils

    pb_utils._model_dir = str(model_dir)
    spec = importlib.util.spec_from_file_location("wordcount_backend", BACKEND)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.TritonPythonModel()
    config = {"name": "wordcount", "max_batch_size": 64}
    model.initialize({"model_config": json.dumps(config), "model_name": "wordcount"})
    return pb_utils, model


def measure(pb_utils: Any, model: Any, batch: int, seconds: float) -> dict[str, float]:
    rng = random.Random(0)
    letters = string.ascii_letters + "  "
    calls: list[float] = []
    rows = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        requests = [
            pb_utils.InferenceRequest(
                model_name="wordcount",
                requested_output_names=["COUNT", "UNIQUE"],
                inputs=[
                    pb_utils.Tensor(
                        "TEXT",
                        np.array(
                            [["".join(rng.choice(letters) for _ in range(32)).encode()]],
                            dtype=np.object_,
                        ),
                    )
                ],
            )
            for _ in range(batch)
        ]
        started = time.perf_counter()
        model.execute(requests)
        calls.append(time.perf_counter() - started)
        rows += batch
    total = sum(calls)
    return {
        "batch": batch,
        "rows_per_s": rows / total,
        "p50_us": float(np.percentile(calls, 50) * 1e6),
        "p99_us": float(np.percentile(calls, 99) * 1e6),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("repository", type=Path)
    parser.add_argument("--batch", type=int, action="append")
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    pb_utils, model = load(args.repository / "wordcount" / "1")
    for batch in args.batch or [1, 5]:
        result = measure(pb_utils, model, batch, args.seconds)
        print(
            f"batch {result['batch']}: {result['rows_per_s']:.0f} rows/s, execute p50 "
            f"{result['p50_us']:.0f} us, p99 {result['p99_us']:.0f} us"
        )


if __name__ == "__main__":
    main()
