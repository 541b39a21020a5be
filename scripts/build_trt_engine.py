#!/usr/bin/env python3
"""Build a TensorRT engine (``model.plan``) from an ONNX model, on the GPU that will serve it.

    python scripts/build_trt_engine.py MODEL.onnx --repo REPO --name mlp_trt [--max-batch 64]
    python scripts/build_trt_engine.py MODEL.onnx --plan out.plan --shape INPUT0:1x256:8x256:64x256

An engine is specific to the TensorRT version and the GPU it was built on, so it is built where
it runs rather than shipped. A leading dynamic dimension is taken as the batch and gets one
optimization profile from 1 to ``--max-batch``; other dynamic dimensions need ``--shape
NAME:MIN:OPT:MAX``. With ``--repo``/``--name`` the script also writes a ``tensorrt_plan``
config.pbtxt (inputs/outputs from the network, ``max_batch_size`` = ``--max-batch`` when the
batch dimension is dynamic) so the engine is a ready model in a Triton repository.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# TensorRT datatype name -> config.pbtxt datatype.
_CONFIG_TYPES = {
    "FLOAT": "TYPE_FP32",
    "HALF": "TYPE_FP16",
    "BF16": "TYPE_BF16",
    "INT8": "TYPE_INT8",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "BOOL": "TYPE_BOOL",
    "UINT8": "TYPE_UINT8",
}


def parse_shape(text: str) -> tuple[str, list[tuple[int, ...]]]:
    """``NAME:1x256:8x256:64x256`` -> (NAME, [min, opt, max])."""
    name, *shapes = text.rsplit(":", 3)
    if len(shapes) != 3:
        raise ValueError(f"--shape '{text}': expected NAME:MIN:OPT:MAX, e.g. INPUT0:1x4:8x4:64x4")
    return name, [tuple(int(d) for d in shape.split("x")) for shape in shapes]


def build_engine(
    onnx_path: Path,
    shapes: dict[str, list[tuple[int, ...]]] | None = None,
    max_batch: int = 64,
    fp16: bool = False,
    workspace_mb: int = 1024,
) -> tuple[bytes, list[dict[str, Any]], list[dict[str, Any]], bool]:
    """The serialized engine, the network's inputs and outputs, and whether it batches."""
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    flag = getattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH", None)
    network = builder.create_network(0 if flag is None else 1 << int(flag))  # TRT 10: implicit
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(onnx_path.read_bytes()):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise RuntimeError(f"TensorRT could not parse {onnx_path}: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace_mb << 20)
    if fp16:
        config.set_flag(trt.BuilderFlag.FP16)
    profile = builder.create_optimization_profile()
    shapes = shapes or {}
    batched = False
    inputs = []
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        dims = list(tensor.shape)
        if tensor.name in shapes:
            low, opt, high = shapes[tensor.name]
        elif -1 in dims[1:]:
            raise ValueError(f"input '{tensor.name}' {dims} has inner dynamic dims; pass --shape")
        elif dims and dims[0] == -1:
            batched = True
            low, opt, high = ((b, *dims[1:]) for b in (1, max(1, max_batch // 2), max_batch))
        else:
            low = opt = high = tuple(dims)
        profile.set_shape(tensor.name, low, opt, high)
        inputs.append({"name": tensor.name, "dtype": tensor.dtype.name, "dims": dims})
    config.add_optimization_profile(profile)
    outputs = [
        {"name": t.name, "dtype": t.dtype.name, "dims": list(t.shape)}
        for t in (network.get_output(i) for i in range(network.num_outputs))
    ]
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise RuntimeError(f"TensorRT failed to build an engine from {onnx_path}")
    return bytes(serialized), inputs, outputs, batched


def config_pbtxt(
    name: str, inputs: list[dict[str, Any]], outputs: list[dict[str, Any]], max_batch: int
) -> str:
    """A tensorrt_plan config; dims drop the batch dimension when the engine batches."""

    def entries(tensors: list[dict[str, Any]]) -> str:
        return ",\n".join(
            f'  {{ name: "{t["name"]}" data_type: {_CONFIG_TYPES[t["dtype"]]} '
            f"dims: [ {', '.join(str(d) for d in (t['dims'][1:] if max_batch else t['dims']))} ] }}"
            for t in tensors
        )

    return (
        f'name: "{name}"\nplatform: "tensorrt_plan"\nmax_batch_size: {max_batch}\n'
        f"input [\n{entries(inputs)}\n]\noutput [\n{entries(outputs)}\n]\n"
        "instance_group [ { kind: KIND_GPU count: 1 } ]\n"
        + ("dynamic_batching { }\n" if max_batch else "")
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("onnx", type=Path, help="the ONNX model to build from")
    parser.add_argument("--plan", type=Path, help="where to write the engine")
    parser.add_argument("--repo", type=Path, help="write <repo>/<name>/1/model.plan + config")
    parser.add_argument("--name", help="model name in --repo")
    parser.add_argument("--shape", action="append", default=[], help="NAME:MIN:OPT:MAX")
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--fp16", action="store_true")
    parser.add_argument("--workspace-mb", type=int, default=1024)
    args = parser.parse_args(argv)
    if not args.plan and not (args.repo and args.name):
        parser.error("give --plan, or --repo and --name")
    shapes = dict(parse_shape(text) for text in args.shape)
    plan, inputs, outputs, batched = build_engine(
        args.onnx, shapes, args.max_batch, args.fp16, args.workspace_mb
    )
    if args.plan:
        args.plan.parent.mkdir(parents=True, exist_ok=True)
        args.plan.write_bytes(plan)
        print(f"wrote {args.plan} ({len(plan)} bytes)")
    if args.repo and args.name:
        version = args.repo / args.name / "1"
        version.mkdir(parents=True, exist_ok=True)
        (version / "model.plan").write_bytes(plan)
        max_batch = args.max_batch if batched else 0
        config = config_pbtxt(args.name, inputs, outputs, max_batch)
        (args.repo / args.name / "config.pbtxt").write_text(config, encoding="utf-8")
        print(f"wrote {args.repo / args.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
