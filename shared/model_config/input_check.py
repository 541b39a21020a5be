"""The inputs of one request against its model's configuration: names, datatypes, shapes and
the batch size, with Triton's wording. Used by the gateway's validation and by the ensemble runner
for each step's inputs (one implementation)."""

from __future__ import annotations

from shared.model_config import ModelConfig, TensorSpec
from shared.wire.envelope import Tensor
from shared.wire.errors import invalid


def check_inputs(config: ModelConfig, inputs: list[Tensor]) -> tuple[list[Tensor], int, str]:
    """The inputs in the config's order, the batch size, and the shape signature (the inputs'
    shapes without the batch dimension, a ragged input's left out: requests with equal
    signatures may share a batch)."""
    model = config.name
    given = {t.name: t for t in inputs}
    for name in given:
        if config.input(name) is None:
            raise invalid(
                f"unexpected inference input '{name}' for model '{model}'; expected inputs: "
                f"{config.input_names}"
            )
    required = [spec.name for spec in config.inputs if not spec.optional]
    missing = [name for name in required if name not in given]
    if missing:
        raise invalid(
            f"expected {len(required)} inputs but got {len(given)} inputs for model '{model}'. "
            f"Got input(s) {sorted(given)}, but missing required input(s) {missing}. "
            f"Please provide all required input(s)."
        )
    batch_size = 1
    batch_sizes: set[int] = set()
    ordered: list[Tensor] = []
    sig_parts: list[str] = []
    for spec in config.inputs:
        tensor = given.get(spec.name)
        if tensor is None:
            continue
        if tensor.datatype != spec.datatype:
            raise invalid(
                f"inference input '{spec.name}' data-type is '{tensor.datatype}', but model "
                f"'{model}' expects '{spec.datatype}'"
            )
        dims = _check_shape(config, spec, tensor.shape)
        if config.max_batch_size > 0:
            batch_sizes.add(tensor.shape[0])
        ordered.append(tensor)
        # A ragged input batches whatever its shape (``allow_ragged_batch``).
        shown = "ragged" if spec.allow_ragged_batch else ",".join(map(str, dims))
        sig_parts.append(f"{spec.name}:{shown}")
    if config.max_batch_size > 0:
        if len(batch_sizes) > 1:
            raise invalid(
                f"inputs of model '{model}' disagree on the batch size (first dimension): "
                f"{sorted(batch_sizes)}; every input must have the same batch size"
            )
        batch_size = batch_sizes.pop() if batch_sizes else 1
        if batch_size > config.max_batch_size:
            raise invalid(
                f"inference request batch-size must be <= {config.max_batch_size} for "
                f"'{model}', got {batch_size}"
            )
        if batch_size < 1:
            raise invalid(f"inference request batch-size must be >= 1 for '{model}', got 0")
    return ordered, batch_size, "|".join(sig_parts)


def _check_shape(config: ModelConfig, spec: TensorSpec, shape: list[int]) -> list[int]:
    """The shape without the batch dimension, after checking it against the config's dims."""
    expected = ([-1] if config.max_batch_size > 0 else []) + list(spec.dims)
    dims = shape[1:] if config.max_batch_size > 0 else shape
    ok = len(shape) == len(expected) and all(
        e == -1 or e == s for e, s in zip(expected, shape, strict=True)
    )
    if not ok:
        raise invalid(
            f"unexpected shape for input '{spec.name}' for model '{config.name}'. Expected "
            f"{_fmt(expected)}, got {_fmt(shape)}"
        )
    return dims


def _fmt(shape: list[int]) -> str:
    return "[" + ",".join(map(str, shape)) + "]"
