"""Implicit state as tensors: Triton's initial state, and the bytes it is committed as.

A state travels to Redis as the tensor's raw little-endian bytes plus its shape (the datatype is
the config's), the same wire form as any tensor, never a Python list. A sequence's first step
(and every START) gets the initial state: the configured ``initial_state`` (zeros or the bytes
of ``<model>/initial_state/<data_file>``), or else zeros with every variable dimension 1, which
is Triton's "uninitialized" state that a model replaces on START.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from shared.model_config.sequences import StateSpec
from shared.wire import datatypes, tensors
from shared.wire.envelope import Tensor
from shared.wire.errors import ConchError, ErrorCode

INITIAL_STATE_FOLDER = "initial_state"


def initial_state(spec: StateSpec, batched: bool, model_dir: Path) -> np.ndarray:
    """One sequence's initial value of a state, with the batch dimension when batching."""
    lead = [1] if batched else []
    initial = spec.initial
    if initial is None:
        shape = lead + [1 if d == -1 else d for d in spec.dims]
        return _zeros(spec.datatype, shape)
    shape = lead + list(initial.dims)
    if initial.zero_data:
        return _zeros(spec.datatype, shape)
    path = model_dir / INITIAL_STATE_FOLDER / initial.data_file
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConchError(
            ErrorCode.INVALID_ARG,
            f"initial_state '{initial.name}' of state '{spec.input_name}': cannot read "
            f"'{path}': {exc.strerror}",
        ) from None
    if spec.datatype == "BYTES":
        return tensors.to_numpy(Tensor(spec.input_name, "BYTES", shape, raw))
    needed = tensors.expected_byte_size(spec.datatype, shape) or 0
    if len(raw) < needed:
        raise ConchError(
            ErrorCode.INVALID_ARG,
            f"initial_state setting expects {needed} bytes, but the data provided from "
            f"{initial.data_file}only has {len(raw)} bytes.",
        )
    return tensors.to_numpy(Tensor(spec.input_name, spec.datatype, shape, raw[:needed])).copy()


def _zeros(datatype: str, shape: list[int]) -> np.ndarray:
    if datatype == "BYTES":
        array = np.empty(tensors.element_count(shape), dtype=object)
        array[:] = [b""] * array.size
        return array.reshape(shape)
    return np.zeros(shape, dtype=datatypes.BY_NAME[datatype].dtype)


def normalize(spec: StateSpec, array: np.ndarray) -> np.ndarray:
    """A state output as the state's datatype, owning its memory (not a view of the batch)."""
    if spec.datatype == "BYTES":
        return np.array(array, dtype=object)
    return np.array(array, dtype=datatypes.BY_NAME[spec.datatype].dtype)


def encode(spec: StateSpec, array: np.ndarray) -> tuple[bytes, str]:
    """The state's committed form: (raw bytes, shape as "d0,d1,...")."""
    tensor = tensors.from_numpy(spec.input_name, array, spec.datatype)
    return tensor.data, ",".join(str(d) for d in tensor.shape)


def decode(spec: StateSpec, data: bytes, shape: str) -> np.ndarray:
    dims = [int(d) for d in shape.split(",")] if shape else []
    return tensors.to_numpy(Tensor(spec.input_name, spec.datatype, dims, data))
