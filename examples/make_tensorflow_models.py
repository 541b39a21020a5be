#!/usr/bin/env python3
"""Write the TensorFlow SavedModel example models (platform ``tensorflow_savedmodel``).

    python examples/make_tensorflow_models.py [REPO]    (default: examples/model_repository)

- ``tf_mlp``: a two-layer MLP (``features`` [-1, 8] FP32 -> ``scores``, ``probabilities``
  [-1, 4]) with dynamic batching, served from its ``serving_default`` signature;
- ``tf_text``: the same SavedModel layout with two signatures; its configuration names the
  non-default ``text_stats`` signature (``TF_SIGNATURE_DEF``), does not batch
  (``max_batch_size: 0``), takes BYTES and lists no outputs (auto-complete fills them in);
- ``tf_auto``: the MLP's SavedModel with no ``config.pbtxt`` at all: platform, inputs, outputs,
  ``max_batch_size`` (4) and dynamic batching all come from Triton's auto-complete.

Weights come from a fixed seed and nothing is downloaded. Without tensorflow installed
(``pip install 'conch[tensorflow]'``) the script says what it skipped and exits 0.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # a script's sibling, not a package
from framework_models import write_if_installed

HERE = Path(__file__).resolve().parent
DEFAULT_REPOSITORY = HERE / "model_repository"
SEED = 20261128
FEATURES, HIDDEN, CLASSES = 8, 16, 4

MLP_CONFIG = """\
name: "tf_mlp"
platform: "tensorflow_savedmodel"
max_batch_size: 32
input [ { name: "features" data_type: TYPE_FP32 dims: [ 8 ] } ]
output [
  { name: "scores" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "probabilities" data_type: TYPE_FP32 dims: [ 4 ] }
]
instance_group [ { kind: KIND_CPU count: 1 } ]
dynamic_batching { max_queue_delay_microseconds: 2000 }
"""

# Unbatched, so dims are the whole shape: [-1] is "any number of strings".
TEXT_CONFIG = """\
name: "tf_text"
platform: "tensorflow_savedmodel"
max_batch_size: 0
input [ { name: "text" data_type: TYPE_STRING dims: [ -1 ] } ]
parameters { key: "TF_SIGNATURE_DEF" value: { string_value: "text_stats" } }
parameters { key: "TF_NUM_INTRA_THREADS" value: { string_value: "1" } }
"""


def _mlp_module(tf: Any) -> Any:
    """A tf.Module whose weights come from a fixed-seed numpy generator."""
    import numpy as np

    rng = np.random.default_rng(SEED)

    class Mlp(tf.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.w1 = tf.Variable(rng.standard_normal((FEATURES, HIDDEN)).astype("float32"))
            self.b1 = tf.Variable(rng.standard_normal(HIDDEN).astype("float32") * 0.1)
            self.w2 = tf.Variable(rng.standard_normal((HIDDEN, CLASSES)).astype("float32"))
            self.b2 = tf.Variable(rng.standard_normal(CLASSES).astype("float32") * 0.1)

            # Wrapped here, not decorated: tf.function is untyped, and a decorator would be too.
            spec = [tf.TensorSpec([None, FEATURES], tf.float32)]
            self.serve = tf.function(self._serve, input_signature=spec)
            self.text_stats = tf.function(
                self._text_stats, input_signature=[tf.TensorSpec([None], tf.string)]
            )

        def _serve(self, features: Any) -> dict[str, Any]:
            hidden = tf.nn.relu(tf.matmul(features, self.w1) + self.b1)
            scores = tf.matmul(hidden, self.w2) + self.b2
            return {"scores": scores, "probabilities": tf.nn.softmax(scores)}

        def _text_stats(self, text: Any) -> dict[str, Any]:
            length = tf.strings.length(text, unit="UTF8_CHAR")
            return {"length": length, "upper": tf.strings.upper(text)}

    return Mlp()


def _write(repository: Path, name: str, config: str | None, save: Any) -> Path:
    model_dir = repository / name
    target = model_dir / "1" / "model.savedmodel"
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    save(str(target))
    if config is not None:
        (model_dir / "config.pbtxt").write_text(config)
    return model_dir


def write_repository(repository: Path) -> list[Path]:
    import tensorflow as tf

    tf.random.set_seed(SEED)
    module = _mlp_module(tf)
    serving = {"serving_default": module.serve}
    both = {"serving_default": module.serve, "text_stats": module.text_stats}
    return [
        _write(repository, "tf_mlp", MLP_CONFIG, lambda p: tf.saved_model.save(module, p, serving)),
        _write(repository, "tf_text", TEXT_CONFIG, lambda p: tf.saved_model.save(module, p, both)),
        _write(repository, "tf_auto", None, lambda p: tf.saved_model.save(module, p, serving)),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repository", nargs="?", type=Path, default=DEFAULT_REPOSITORY)
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # no C++ INFO banners
    return write_if_installed(
        args.repository,
        "tensorflow",
        "tensorflow",
        ["tf_mlp", "tf_text", "tf_auto"],
        write_repository,
    )


if __name__ == "__main__":
    sys.exit(main())
