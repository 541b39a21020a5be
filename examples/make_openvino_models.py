#!/usr/bin/env python3
"""Write the OpenVINO example models: ``openvino_mlp`` (an OpenVINO IR) and ``openvino_onnx``
(an ONNX file served by the OpenVINO backend).

    python examples/make_openvino_models.py [REPO]    (default: examples/model_repository)

Both come from the example ``mlp`` of ``make_models.py`` (same seed, same weights), so the three
models answer the same inputs alike and can be compared. ``openvino_mlp`` is that graph
converted to IR with ``openvino.convert_model`` and saved with its weights in FP32 (``save_model``
would otherwise compress them to FP16); its configuration batches dynamically and shows Triton's
OpenVINO parameter keys. ``openvino_onnx`` serves the ONNX file as it is
(``default_model_filename: "model.onnx"``), unbatched, with a configuration that lists no
tensors: the backend completes them from the model. Nothing is downloaded; without the
``openvino`` package the script says what it skipped and exits 0.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # a script's sibling, not a package
import make_models
from framework_models import write_if_installed

DEFAULT_REPOSITORY = make_models.DEFAULT_REPOSITORY

MLP_CONFIG = """\
name: "openvino_mlp"
backend: "openvino"
max_batch_size: 64
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 256 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching { max_queue_delay_microseconds: 2000 }
parameters [
  { key: "INFERENCE_NUM_THREADS" value: { string_value: "1" } },
  { key: "NUM_STREAMS" value: { string_value: "1" } },
  { key: "PERFORMANCE_HINT" value: { string_value: "LATENCY" } }
]
"""

# No input or output listed: the OpenVINO backend auto-completes them from the model.
ONNX_CONFIG = """\
name: "openvino_onnx"
backend: "openvino"
default_model_filename: "model.onnx"
max_batch_size: 0
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


def write_repository(repository: Path) -> list[Path]:
    """Write both models under ``repository``; return their directories."""
    import openvino as ov

    onnx_dir = repository / "openvino_onnx"
    (onnx_dir / "1").mkdir(parents=True, exist_ok=True)
    onnx_file = onnx_dir / "1" / "model.onnx"
    onnx_file.write_bytes(make_models.build_mlp().onnx_model.SerializeToString())
    (onnx_dir / "config.pbtxt").write_text(ONNX_CONFIG, encoding="utf-8")

    ir_dir = repository / "openvino_mlp"
    (ir_dir / "1").mkdir(parents=True, exist_ok=True)
    ov.save_model(
        ov.convert_model(str(onnx_file)), ir_dir / "1" / "model.xml", compress_to_fp16=False
    )
    (ir_dir / "config.pbtxt").write_text(MLP_CONFIG, encoding="utf-8")
    return [ir_dir, onnx_dir]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "repository",
        nargs="?",
        type=Path,
        default=DEFAULT_REPOSITORY,
        help=f"where to write the repository (default: {DEFAULT_REPOSITORY})",
    )
    args = parser.parse_args(argv)
    return write_if_installed(
        args.repository, "openvino", "openvino", ["openvino_mlp", "openvino_onnx"], write_repository
    )


if __name__ == "__main__":
    sys.exit(main())
