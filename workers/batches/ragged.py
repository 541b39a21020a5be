"""Ragged batching as Triton defines it, as pure functions over one batch's request inputs.

``batch_input``: tensors computed from the formed batch, given to each request in Triton's
per-request form (``model_config.proto``): ``BATCH_ELEMENT_COUNT`` shape [1] per request,
``..._WITH_ZERO`` [2] (a leading 0) for the first request, ``BATCH_MAX_ELEMENT_COUNT_AS_SHAPE``
[max] for the first and [0] for the others, ``BATCH_ITEM_SHAPE`` [batch, rank] and its
``_FLATTEN`` [batch * rank]. A backend that concatenates the batch (``TensorModelInstance``) thus
gets Triton's batched forms (e.g. accumulated counts [3, 7, 12]); the Python backend sees each
request's own part. An ``allow_ragged_batch`` input is concatenated flattened into one 1-D tensor;
a ``BATCH_SCATTER_WITH_INPUT_SHAPE`` output is split back by its source input's shapes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from shared.model_config import ModelConfig

Inputs = Mapping[str, np.ndarray]
_DTYPES = {"INT32": np.int32, "INT64": np.int64, "FP32": np.float32}


class HasInputs(Protocol):
    inputs: dict[str, np.ndarray]


def add_batch_inputs(config: ModelConfig, requests: Sequence[HasInputs]) -> None:
    """Give each request of a formed batch its part of the config's batch inputs."""
    if config.batch_inputs:
        added = batch_inputs(config, [r.inputs for r in requests])
        for request, extra in zip(requests, added, strict=True):
            request.inputs = {**request.inputs, **extra}  # a warmup batch shares one dict


def batch_inputs(config: ModelConfig, requests: Sequence[Inputs]) -> list[dict[str, np.ndarray]]:
    """For each request, the batch-input tensors it gets (by target name)."""
    added: list[dict[str, np.ndarray]] = [{} for _ in requests]
    for spec in config.batch_inputs:
        dtype = _DTYPES[spec.datatype]
        source = spec.source_input[0]
        arrays = [r.get(source) for r in requests]
        counts = [0 if a is None else int(a.size) for a in arrays]
        parts = _parts(spec.kind, arrays, counts)
        for index, part in enumerate(parts):
            for target in spec.target_name:
                added[index][target] = np.asarray(part, dtype=dtype)
    return added


def _parts(kind: str, arrays: list[np.ndarray | None], counts: list[int]) -> list[np.ndarray]:
    accumulated = np.cumsum(counts).tolist() if counts else []
    if kind == "BATCH_ELEMENT_COUNT":
        return [np.array([c]) for c in counts]
    if kind == "BATCH_ACCUMULATED_ELEMENT_COUNT":
        return [np.array([a]) for a in accumulated]
    if kind == "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO":
        return [np.array([0, a] if i == 0 else [a]) for i, a in enumerate(accumulated)]
    if kind == "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE":
        most = max(counts, default=0)
        return [np.zeros(most if i == 0 else 0) for i in range(len(counts))]
    if kind in ("BATCH_ITEM_SHAPE", "BATCH_ITEM_SHAPE_FLATTEN"):
        parts = []
        for array in arrays:
            shape = [] if array is None else list(array.shape)
            batch, item = (shape[0], shape[1:]) if shape else (0, [])
            rows = np.array(item * batch, dtype=np.int64).reshape(batch, len(item))
            parts.append(rows.reshape(-1) if kind.endswith("FLATTEN") else rows)
        return parts
    raise ValueError(f"batch_input kind {kind} is not supported")  # refused at load


def is_ragged(config: ModelConfig, name: str) -> bool:
    spec = config.input(name)
    return spec is not None and spec.allow_ragged_batch


def has_ragged(config: ModelConfig) -> bool:
    """Whether a batch of this model is assembled or split the ragged way, even a batch of one."""
    return bool(config.batch_outputs) or any(s.allow_ragged_batch for s in config.inputs)


def concatenate(config: ModelConfig, name: str, arrays: Sequence[np.ndarray]) -> np.ndarray:
    """One input of the batch: a ragged input flattened into one 1-D tensor (as Triton's
    backends do), any other along the batch dimension."""
    if is_ragged(config, name):
        return np.concatenate([a.reshape(-1) for a in arrays])
    return np.concatenate(arrays)


def scatter_shapes(
    config: ModelConfig, output: str, requests: Sequence[Inputs]
) -> list[list[int]] | None:
    """The shape of ``output`` for each request when it is a ``BATCH_SCATTER_WITH_INPUT_SHAPE``
    output: its source input's shape, with the output's fixed dims where it has them."""
    for entry in config.batch_outputs:
        if output in entry.target_name:
            source = entry.source_input[0]
            spec = config.output(output)
            dims = spec.dims if spec is not None else []
            shapes = []
            for inputs in requests:
                shape = list(inputs[source].shape)
                rest = [
                    shape[k + 1] if k + 1 < len(shape) and (d == -1) else d
                    for k, d in enumerate(dims)
                ]
                shapes.append(shape[:1] + rest if len(dims) else shape)
            return shapes
    return None


def scatter(value: np.ndarray, shapes: list[list[int]]) -> list[np.ndarray]:
    """Split a batched output into consecutive parts of the given shapes; raises ValueError
    when the output's element count is not their sum."""
    sizes = [int(np.prod(s)) for s in shapes]
    flat = value.reshape(-1)
    if flat.size != sum(sizes):
        raise ValueError(
            f"has {flat.size} elements; expected {sum(sizes)} to scatter by the input shapes "
            f"{shapes}"
        )
    parts, offset = [], 0
    for shape, size in zip(shapes, sizes, strict=True):
        parts.append(flat[offset : offset + size].reshape(shape))
        offset += size
    return parts
