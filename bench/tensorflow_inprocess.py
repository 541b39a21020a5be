"""TensorFlow called in-process on the example ``tf_mlp`` SavedModel: the floor a mesh's figures
are read against (docs/journal/2026-11-backend-tensorflow.md).

    .venv/bin/python -m bench.tensorflow_inprocess REPO [--batch 1 --batch 8] [--secs 3]

Two ways, each at every batch size: TensorFlow's own eager call of the loaded signature
(``tf.saved_model.load(...).signatures["serving_default"]``, one thread per pool as the worker
sets it) and the worker's instance (``TensorFlowInstance.run``: the session callable the
tensorflow worker executes a batch with). Prints calls/s, rows/s and p50/p99 per call.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def _measure(call: Callable[[], Any], secs: float) -> tuple[float, float, float]:
    """(calls/s, p50 µs, p99 µs) of ``call`` run back to back for ``secs``."""
    for _ in range(50):
        call()
    durations: list[float] = []
    end = time.perf_counter() + secs
    while time.perf_counter() < end:
        start = time.perf_counter()
        call()
        durations.append(time.perf_counter() - start)
    micros = np.array(durations) * 1e6
    return (
        len(durations) / sum(durations),
        float(np.percentile(micros, 50)),
        float(np.percentile(micros, 99)),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repository", type=Path)
    parser.add_argument("--batch", type=int, action="append")
    parser.add_argument("--secs", type=float, default=3.0)
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from shared.storage.repository import read_model
    from workers.backend import LoadSpec
    from workers.tensorflow.backend import TensorFlowInstance

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    model = read_model(args.repository / "tf_mlp")
    path = model.version_path(1)
    eager = tf.saved_model.load(str(path / "model.savedmodel")).signatures["serving_default"]
    group = model.config.instance_groups[0]
    instance = TensorFlowInstance(LoadSpec(model.config, 1, path, model.path, group, 0))
    print("way,batch,calls/s,rows/s,p50_us,p99_us")
    for batch in args.batch or [1, 8]:
        x = np.random.default_rng(batch).standard_normal((batch, 8)).astype(np.float32)

        def eager_call(x: np.ndarray = x) -> Any:
            return {k: v.numpy() for k, v in eager(features=tf.constant(x)).items()}

        def instance_call(x: np.ndarray = x) -> Any:
            return instance.run({"features": x}, ["scores", "probabilities"])

        ways: dict[str, Callable[[], Any]] = {
            "tf eager signature": eager_call,
            "worker instance": instance_call,
        }
        for way, call in ways.items():
            rate, p50, p99 = _measure(call, args.secs)
            print(f"{way},{batch},{rate:.0f},{rate * batch:.0f},{p50:.0f},{p99:.0f}")
    instance.unload()
    return 0


if __name__ == "__main__":
    sys.exit(main())
