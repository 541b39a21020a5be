#!/usr/bin/env python3
"""Write Conch's example Triton model repository: ``simple``, ``mlp``, ``add_sub`` and more
(``simple_ab`` has two versions, for A/B weights), with the sequence models of
``sequence_models.py`` (``simple_sequence``, ``simple_dyna_sequence``,
``sequence_accumulator``) and the ensembles of ``ensemble_models.py`` (``mlp_ensemble``,
``add_sub_chain``).

Longer than 300 lines because it is the catalogue of the plain example models: one builder each,
so the repository's models read in one place (the sequence and ensemble models have their own
modules).

    python examples/make_models.py [REPO]     (default: examples/model_repository)

The models are built with ``onnx.helper`` rather than downloaded, so the repository can be made
on a machine with no network and every run writes the same bytes (fixed seed, no timestamps).
IR version 8 / opset 17 keeps them loadable by any onnxruntime >= 1.13.

``mlp`` and ``add_sub`` have the same graphs, tensor names and weights as the benchmark harness's
``make_models.py`` (same seed, same initialisation order), so the harness's in-process reference
and correctness checks hold for the models Conch serves. Only the ONNX ``producer_name`` differs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))  # a script's sibling, not a package
import ensemble_models
import sequence_models

SEED = 20261121  # the benchmark harness's seed: the mlp weights must equal its weights
OPSET = 17
IR_VERSION = 8  # readable by any onnxruntime >= 1.13
PRODUCER = "conch/examples/make_models.py"
PLATFORM = "onnxruntime_onnx"
DEFAULT_REPOSITORY = Path(__file__).resolve().parent / "model_repository"

# ONNX element type and Triton's config.pbtxt name for each datatype used here.
_TYPES = {
    "FP32": (TensorProto.FLOAT, "TYPE_FP32"),
    "INT32": (TensorProto.INT32, "TYPE_INT32"),
    "INT8": (TensorProto.INT8, "TYPE_INT8"),
}


@dataclass(frozen=True)
class TensorDef:
    """One input or output: its name, v2 datatype and per-row width (the batch dim is implied;
    a width of -1 is a variable-size dimension)."""

    name: str
    datatype: str
    width: int
    # Classification labels, one per line (written beside config.pbtxt).
    label_filename: str = ""


@dataclass(frozen=True)
class ExampleModel:
    """A model ready to write: the ONNX graph plus what its config.pbtxt declares."""

    name: str
    onnx_model: onnx.ModelProto
    inputs: tuple[TensorDef, ...]
    outputs: tuple[TensorDef, ...]
    max_batch_size: int
    max_queue_delay_microseconds: int | None
    # More config.pbtxt text (e.g. a response_cache section) and files beside it (name -> text).
    extra_config: str = ""
    files: tuple[tuple[str, str], ...] = ()
    # Versions beyond 1 (version -> its graph), for models with several; version 1 is onnx_model.
    more_versions: tuple[tuple[int, onnx.ModelProto], ...] = ()

    def config_pbtxt(self) -> str:
        """The model's config.pbtxt in protobuf text format with Triton's field names."""
        return (
            f'name: "{self.name}"\n'
            f'platform: "{PLATFORM}"\n'
            f"max_batch_size: {self.max_batch_size}\n"
            + _tensor_list("input", self.inputs)
            + _tensor_list("output", self.outputs)
            + (
                "dynamic_batching {\n"
                f"  max_queue_delay_microseconds: {self.max_queue_delay_microseconds}\n"
                "}\n"
                if self.max_queue_delay_microseconds is not None
                else ""
            )
            + self.extra_config
        )


def _tensor_list(kind: str, tensors: Sequence[TensorDef]) -> str:
    items = ",\n".join(
        f"  {{\n"
        f'    name: "{t.name}"\n'
        f"    data_type: {_TYPES[t.datatype][1]}\n"
        f"    dims: [ {t.width} ]\n"
        + (f'    label_filename: "{t.label_filename}"\n' if t.label_filename else "")
        + "  }"
        for t in tensors
    )
    return f"{kind} [\n{items}\n]\n"


def _value_info(tensor: TensorDef) -> onnx.ValueInfoProto:
    # A symbolic leading "batch" dim: Triton adds the batch dimension when max_batch_size > 0.
    width: int | str = tensor.width if tensor.width > 0 else "width"
    return helper.make_tensor_value_info(tensor.name, _TYPES[tensor.datatype][0], ["batch", width])


def _finish(
    graph_name: str,
    nodes: list[onnx.NodeProto],
    inputs: tuple[TensorDef, ...],
    outputs: tuple[TensorDef, ...],
    initializers: list[onnx.TensorProto] | None = None,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        graph_name,
        [_value_info(t) for t in inputs],
        [_value_info(t) for t in outputs],
        initializers or [],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name=PRODUCER
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def _add_sub(name: str, datatype: str, max_batch_size: int, delay_us: int) -> ExampleModel:
    inputs = (TensorDef("INPUT0", datatype, 16), TensorDef("INPUT1", datatype, 16))
    outputs = (TensorDef("OUTPUT0", datatype, 16), TensorDef("OUTPUT1", datatype, 16))
    nodes = [
        helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
        helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
    ]
    return ExampleModel(
        name=name,
        onnx_model=_finish(name, nodes, inputs, outputs),
        inputs=inputs,
        outputs=outputs,
        max_batch_size=max_batch_size,
        max_queue_delay_microseconds=delay_us,
    )


def build_simple() -> ExampleModel:
    """Triton's classic ``simple`` model: INT32 [16] sum and difference, so its examples work."""
    return _add_sub("simple", "INT32", max_batch_size=8, delay_us=1000)


def build_simple_int8() -> ExampleModel:
    """Triton's ``simple_int8``: ``simple`` in INT8 (grpc_explicit_int8_content_client.py)."""
    return _add_sub("simple_int8", "INT8", max_batch_size=8, delay_us=1000)


def build_custom_identity_int32() -> ExampleModel:
    """Triton's ``custom_identity_int32``: OUTPUT0 = INPUT0, INT32 of any width
    (memory_growth_test.py); no dynamic batching, each request runs alone."""
    inputs = (TensorDef("INPUT0", "INT32", -1),)
    outputs = (TensorDef("OUTPUT0", "INT32", -1),)
    nodes = [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])]
    return ExampleModel(
        name="custom_identity_int32",
        onnx_model=_finish("custom_identity_int32", nodes, inputs, outputs),
        inputs=inputs,
        outputs=outputs,
        max_batch_size=8,
        max_queue_delay_microseconds=None,
    )


def build_add_sub() -> ExampleModel:
    """The benchmark's ``add_sub``: FP32 [16] sum and difference, measuring serving overhead."""
    return _add_sub("add_sub", "FP32", max_batch_size=64, delay_us=2000)


def mlp_weights() -> list[np.ndarray]:
    """The MLP's weights in the benchmark harness's order: one generator, drawn layer by layer."""
    rng = np.random.default_rng(SEED)
    dims = [256, 1024, 1024, 16]
    return [
        (rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32)
        for n_in, n_out in pairwise(dims)
    ]


MLP_LABELS = "mlp_labels.txt"


def build_mlp(name: str = "mlp", extra_config: str = "") -> ExampleModel:
    """A compute-bound FP32 MLP (256 -> 1024 -> 1024 -> 16), the benchmark's ``mlp``. Its 16
    outputs are labelled ``class_00`` .. ``class_15`` (Triton's classification extension)."""
    weights = mlp_weights()
    initializers = [numpy_helper.from_array(w, f"W{i}") for i, w in enumerate(weights)]
    nodes: list[onnx.NodeProto] = []
    x = "INPUT0"
    for i in range(len(weights)):
        if i == len(weights) - 1:  # last layer: no Relu
            nodes.append(helper.make_node("MatMul", [x, f"W{i}"], ["OUTPUT0"]))
        else:
            nodes.append(helper.make_node("MatMul", [x, f"W{i}"], [f"MM{i}"]))
            nodes.append(helper.make_node("Relu", [f"MM{i}"], [f"H{i}"]))
            x = f"H{i}"
    inputs = (TensorDef("INPUT0", "FP32", 256),)
    outputs = (TensorDef("OUTPUT0", "FP32", 16, label_filename=MLP_LABELS),)
    labels = "".join(f"class_{index:02d}\n" for index in range(16))
    return ExampleModel(
        name=name,
        onnx_model=_finish(name, nodes, inputs, outputs, initializers),
        inputs=inputs,
        outputs=outputs,
        max_batch_size=64,
        max_queue_delay_microseconds=2000,
        extra_config=extra_config,
        files=((MLP_LABELS, labels),),
    )


def _scale(name: str, factor: int) -> onnx.ModelProto:
    const = numpy_helper.from_array(np.array([factor], dtype=np.int32), "FACTOR")
    nodes = [helper.make_node("Mul", ["INPUT0", "FACTOR"], ["OUTPUT0"])]
    return _finish(
        name,
        nodes,
        (TensorDef("INPUT0", "INT32", 1),),
        (TensorDef("OUTPUT0", "INT32", 1),),
        [const],
    )


def build_simple_ab() -> ExampleModel:
    """Two versions for A/B weights (``conch admin weights set simple_ab 1=20 2=80``): version
    ``v`` answers OUTPUT0 = v * INPUT0, so each answer tells which version served it.
    ``version_policy: all`` loads both; a request without a version follows the weights."""
    inputs = (TensorDef("INPUT0", "INT32", 1),)
    outputs = (TensorDef("OUTPUT0", "INT32", 1),)
    return ExampleModel(
        name="simple_ab",
        onnx_model=_scale("simple_ab", 1),
        inputs=inputs,
        outputs=outputs,
        max_batch_size=8,
        max_queue_delay_microseconds=None,
        extra_config="version_policy {\n  all {}\n}\n",
        more_versions=((2, _scale("simple_ab", 2)),),
    )


def build_mlp_cached() -> ExampleModel:
    """``mlp`` with Triton's response cache on: a repeated request is answered from the cache
    (needs a cache: ``conch up --cache-config local,size=64M``)."""
    return build_mlp("mlp_cached", "response_cache {\n  enable: true\n}\n")


Example = (
    ExampleModel
    | sequence_models.SequenceExample
    | ensemble_models.OnnxExample
    | ensemble_models.EnsembleExample
)

BUILDERS: dict[str, Callable[[], Example]] = {
    "simple": build_simple,
    "mlp": build_mlp,
    "add_sub": build_add_sub,
    "simple_int8": build_simple_int8,
    "custom_identity_int32": build_custom_identity_int32,
    "mlp_cached": build_mlp_cached,
    "simple_ab": build_simple_ab,
    **sequence_models.BUILDERS,
    **ensemble_models.BUILDERS,
}


def write_model(repository: Path, model: Example) -> Path:
    """Write ``<repository>/<name>/config.pbtxt``, ``<name>/1/model.onnx`` (and the other
    versions' ``<name>/<v>/model.onnx``) and any side files (labels); return the dir."""
    model_dir = repository / model.name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    if model.onnx_model is not None:  # an ensemble has an empty version directory
        (model_dir / "1" / "model.onnx").write_bytes(model.onnx_model.SerializeToString())
    (model_dir / "config.pbtxt").write_text(model.config_pbtxt(), encoding="utf-8")
    for name, text in getattr(model, "files", ()):
        (model_dir / name).write_text(text, encoding="utf-8")
    for version, graph in getattr(model, "more_versions", ()):
        (model_dir / str(version)).mkdir(exist_ok=True)
        (model_dir / str(version) / "model.onnx").write_bytes(graph.SerializeToString())
    return model_dir


def write_repository(
    path: str | Path = DEFAULT_REPOSITORY, names: Iterable[str] | None = None
) -> list[Path]:
    """Write the named example models (all of them by default); return their directories."""
    repository = Path(path)
    selected = list(BUILDERS) if names is None else list(names)
    unknown = [name for name in selected if name not in BUILDERS]
    if unknown:
        raise ValueError(f"unknown example model(s) {unknown}; expected some of {list(BUILDERS)}")
    return [write_model(repository, BUILDERS[name]()) for name in selected]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "repository",
        nargs="?",
        type=Path,
        default=DEFAULT_REPOSITORY,
        help=f"where to write the repository (default: {DEFAULT_REPOSITORY})",
    )
    parser.add_argument(
        "--model",
        action="append",
        choices=list(BUILDERS),
        help="write only this model (repeatable; default: all)",
    )
    args = parser.parse_args(argv)
    for model_dir in write_repository(args.repository, args.model):
        print(f"wrote {model_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
