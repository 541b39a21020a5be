#!/usr/bin/env python3
"""Write the big-machine example: a TorchScript MLP for the GPU, with and without batching.

    python examples/make_gpu_models.py REPO [--kind KIND_GPU|KIND_CPU] [--count N]

``gpu_mlp``: FP32 INPUT__0 [batch, 1024] -> Linear 4096 -> ReLU -> Linear 4096 -> ReLU ->
Linear 16 -> OUTPUT__0 [batch, 16] (21 M weights, 84 MB), ``max_batch_size: 64`` and
``dynamic_batching``; ``gpu_mlp_nobatch`` is the same network (same file) served by Triton's
default scheduler, one request per execution. Issue 19 measured these on an H100. ``--kind
KIND_CPU`` writes the same models for a machine without a GPU (to try ``scripts/big_machine.sh``
first). Weights come from a fixed seed; nothing is downloaded; torch is needed.
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

SEED = 20261123
WIDTHS = (1024, 4096, 4096, 16)

CONFIG = """\
name: "{name}"
platform: "pytorch_libtorch"
max_batch_size: 64
input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ {inputs} ] }} ]
output [ {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ {outputs} ] }} ]
instance_group [ {{ kind: {kind} count: {count} }} ]
{batching}model_warmup [ {{
  name: "zeros" batch_size: 1
  inputs {{ key: "INPUT__0" value: {{ data_type: TYPE_FP32 dims: [ {inputs} ] zero_data: true }} }}
}} ]
"""
BATCHING = "dynamic_batching { max_queue_delay_microseconds: 500 }\n"


def write(repository: Path, kind: str = "KIND_GPU", count: int = 1) -> list[Path]:
    import torch

    torch.manual_seed(SEED)
    layers: list[torch.nn.Module] = []
    for index, (fan_in, fan_out) in enumerate(itertools.pairwise(WIDTHS)):
        layers.append(torch.nn.Linear(fan_in, fan_out))
        if index < len(WIDTHS) - 2:
            layers.append(torch.nn.ReLU())
    network = torch.nn.Sequential(*layers).eval()
    written: list[Path] = []
    for name, batching in (("gpu_mlp", BATCHING), ("gpu_mlp_nobatch", "")):
        version = repository / name / "1"
        version.mkdir(parents=True, exist_ok=True)
        config = CONFIG.format(
            name=name,
            inputs=WIDTHS[0],
            outputs=WIDTHS[-1],
            kind=kind,
            count=count,
            batching=batching,
        )
        (repository / name / "config.pbtxt").write_text(config, encoding="utf-8")
        written.append(repository / name)
    first = written[0] / "1" / "model.pt"
    with warnings.catch_warnings():  # torch >= 2.10 marks TorchScript deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        traced = torch.jit.trace(network, (torch.zeros(2, WIDTHS[0]),))
        torch.jit.save(traced, str(first))
    shutil.copyfile(first, written[1] / "1" / "model.pt")
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repository", type=Path)
    parser.add_argument("--kind", choices=["KIND_GPU", "KIND_CPU"], default="KIND_GPU")
    parser.add_argument("--count", type=int, default=1, help="instances per GPU (or on the CPU)")
    args = parser.parse_args(argv)
    for model_dir in write(args.repository, args.kind, args.count):
        print(f"wrote {model_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
