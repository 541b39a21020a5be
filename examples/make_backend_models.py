#!/usr/bin/env python3
"""Write the non-ONNX example models: TorchScript, torch.export and Triton Python models.

    python examples/make_backend_models.py [REPO]    (default: examples/model_repository)
    python examples/make_backend_models.py --model tokenizer --model python_probe

Together with ``make_models.py`` (ONNX) this makes one repository that uses every backend Conch
serves. Weights come from a fixed seed and nothing is downloaded. The Python models are copied
from ``examples/python_models/<name>/model.py``; only the torch models need torch installed.
"""

from __future__ import annotations

import argparse
import shutil
import struct
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # a script's sibling, not a package
from python_model_configs import (
    ACCUMULATOR_PY_CONFIG,
    BLS_PIPELINE_CONFIG,
    BLS_REPEAT_CONFIG,
    PROBE_CONFIG,
    RECORDER_CONFIG,
    REPEAT_INT32_CONFIG,
    SIMPLE_IDENTITY_CONFIG,
    SIMPLE_STRING_CONFIG,
    SQUARE_INT32_CONFIG,
    STRING_DYNA_CONFIG,
)

HERE = Path(__file__).resolve().parent
DEFAULT_REPOSITORY = HERE / "model_repository"
PYTHON_MODELS = HERE / "python_models"
SEED = 20261121
TOKENIZER_MAX_LENGTH = 16
WARMUP_TEXT = b"Hello, Conch! Warm up the tokenizer."

TORCHSCRIPT_CONFIG = """\
name: "torchscript_mlp"
platform: "pytorch_libtorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [
  { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] },
  { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 3 ] }
]
dynamic_batching { max_queue_delay_microseconds: 1000 }
model_warmup [ {
  name: "zeros" batch_size: 2
  inputs { key: "INPUT__0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } }
} ]
"""

# Inputs listed in another order than forward(features, scale): the backend matches them by name.
EXPORT_CONFIG = """\
name: "export_mlp"
platform: "pytorch_torch_export"
max_batch_size: 8
input [
  { name: "scale" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "features" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "scores" data_type: TYPE_FP32 dims: [ 3 ] },
  { name: "norm" data_type: TYPE_FP32 dims: [ 1 ] }
]
dynamic_batching { max_queue_delay_microseconds: 1000 }
model_warmup [ {
  name: "random" batch_size: 1 count: 2
  inputs { key: "features" value: { data_type: TYPE_FP32 dims: [ 4 ] random_data: true } }
  inputs { key: "scale" value: { data_type: TYPE_FP32 dims: [ 1 ] random_data: true } }
} ]
"""

TOKENIZER_CONFIG = f"""\
name: "tokenizer"
backend: "python"
max_batch_size: 8
input [ {{ name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] }} ]
output [
  {{ name: "TOKEN_IDS" data_type: TYPE_INT64 dims: [ {TOKENIZER_MAX_LENGTH} ] }},
  {{ name: "NORMALIZED" data_type: TYPE_STRING dims: [ 1 ] }}
]
parameters {{ key: "max_length" value: {{ string_value: "{TOKENIZER_MAX_LENGTH}" }} }}
dynamic_batching {{ max_queue_delay_microseconds: 1000 }}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
model_warmup [ {{
  name: "sample_text" batch_size: 2
  inputs {{ key: "TEXT" value: {{ data_type: TYPE_STRING dims: [ 1 ] input_data_file: "text" }} }}
}} ]
"""


def _model_dir(repository: Path, name: str, config: str) -> Path:
    version = repository / name / "1"
    version.mkdir(parents=True, exist_ok=True)
    (repository / name / "config.pbtxt").write_text(config, encoding="utf-8")
    return version


def _torch_modules() -> tuple[Any, Any]:
    """The two example networks, built only when torch is needed."""
    import torch

    class Classifier(torch.nn.Module):
        """Logits and probabilities: two positional outputs (OUTPUT__0, OUTPUT__1)."""

        def __init__(self) -> None:
            super().__init__()
            self.hidden = torch.nn.Linear(4, 8)
            self.out = torch.nn.Linear(8, 3)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            logits = self.out(torch.relu(self.hidden(x)))
            return logits, torch.softmax(logits, dim=-1)

    class Scorer(torch.nn.Module):
        """Two named inputs in forward order (features, scale) and two outputs."""

        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 3)

        def forward(
            self, features: torch.Tensor, scale: torch.Tensor
        ) -> tuple[torch.Tensor, torch.Tensor]:
            return torch.tanh(self.linear(features)) * scale, features.norm(dim=-1, keepdim=True)

    torch.manual_seed(SEED)
    return Classifier().eval(), Scorer().eval()


def write_torchscript(repository: Path) -> Path:
    import torch

    classifier, _ = _torch_modules()
    version = _model_dir(repository, "torchscript_mlp", TORCHSCRIPT_CONFIG)
    with warnings.catch_warnings():  # torch >= 2.10 marks TorchScript deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        traced = torch.jit.trace(classifier, (torch.zeros(2, 4),))
        torch.jit.save(traced, str(version / "model.pt"))
    return version.parent


def write_export(repository: Path) -> Path:
    import torch
    from torch.export import Dim

    _, scorer = _torch_modules()
    version = _model_dir(repository, "export_mlp", EXPORT_CONFIG)
    batch = Dim("batch", min=1, max=8)
    program = torch.export.export(
        scorer,
        (torch.zeros(2, 4), torch.ones(2, 1)),
        dynamic_shapes={"features": {0: batch}, "scale": {0: batch}},
    )
    torch.export.save(program, str(version / "model.pt2"))
    return version.parent


def write_tokenizer(repository: Path) -> Path:
    version = _model_dir(repository, "tokenizer", TOKENIZER_CONFIG)
    shutil.copyfile(PYTHON_MODELS / "tokenizer" / "model.py", version / "model.py")
    # Triton's warmup file format for TYPE_STRING: each element as a 4-byte length + bytes.
    (version / "warmup").mkdir(exist_ok=True)
    sample = struct.pack("<I", len(WARMUP_TEXT)) + WARMUP_TEXT
    (version / "warmup" / "text").write_bytes(sample)
    return version.parent


def write_probe(repository: Path) -> Path:
    version = _model_dir(repository, "python_probe", PROBE_CONFIG)
    shutil.copyfile(PYTHON_MODELS / "python_probe" / "model.py", version / "model.py")
    return version.parent


def _python_model(name: str, config: str) -> Callable[[Path], Path]:
    """A writer for a Python model whose model.py is ``examples/python_models/<name>/``."""

    def write(repository: Path) -> Path:
        version = _model_dir(repository, name, config)
        shutil.copyfile(PYTHON_MODELS / name / "model.py", version / "model.py")
        return version.parent

    return write


BUILDERS: dict[str, Callable[[Path], Path]] = {
    "torchscript_mlp": write_torchscript,
    "export_mlp": write_export,
    "tokenizer": write_tokenizer,
    "python_probe": write_probe,
    "simple_string": _python_model("simple_string", SIMPLE_STRING_CONFIG),
    "simple_identity": _python_model("simple_identity", SIMPLE_IDENTITY_CONFIG),
    "repeat_int32": _python_model("repeat_int32", REPEAT_INT32_CONFIG),
    "square_int32": _python_model("square_int32", SQUARE_INT32_CONFIG),
    "sequence_accumulator_py": _python_model("sequence_accumulator_py", ACCUMULATOR_PY_CONFIG),
    "simple_string_dyna_sequence": _python_model("simple_string_dyna_sequence", STRING_DYNA_CONFIG),
    "chaos_recorder": _python_model("chaos_recorder", RECORDER_CONFIG),
    "bls_pipeline": _python_model("bls_pipeline", BLS_PIPELINE_CONFIG),
    "bls_repeat": _python_model("bls_repeat", BLS_REPEAT_CONFIG),
}


def write_repository(
    path: str | Path = DEFAULT_REPOSITORY, names: Iterable[str] | None = None
) -> list[Path]:
    """Write the named models (all by default) into the repository; return their directories."""
    repository = Path(path)
    selected = list(BUILDERS) if names is None else list(names)
    unknown = [name for name in selected if name not in BUILDERS]
    if unknown:
        raise ValueError(f"unknown example model(s) {unknown}; expected some of {list(BUILDERS)}")
    return [BUILDERS[name](repository) for name in selected]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repository", nargs="?", type=Path, default=DEFAULT_REPOSITORY)
    parser.add_argument("--model", action="append", choices=list(BUILDERS))
    args = parser.parse_args(argv)
    for model_dir in write_repository(args.repository, args.model):
        print(f"wrote {model_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
