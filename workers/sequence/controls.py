"""The control tensors the sequence batcher gives a model with each step. Pure.

As Triton's sequence batcher: START, END and READY carry the configured false/true values
(``int32_false_true``, ``fp32_false_true``, ``bool_false_true``); a step that starts and ends a
sequence gets both true; a padding ("null") request of the direct strategy gets READY false and
the others false. CORRID carries the sequence id in the control's ``data_type``: a string id as
a BYTES element, an unsigned id as the low bytes of its little-endian uint64 (what Triton copies
into a 4-byte type), 0 for padding. Each tensor is one element per request: shape [1, 1] when the
model batches, [1] when it does not.
"""

from __future__ import annotations

import numpy as np

from shared.model_config.sequences import END, READY, START, Control, SequenceSpec
from shared.wire import datatypes
from shared.wire.sequence_params import FLAG_END, FLAG_START


def control_tensors(
    spec: SequenceSpec, flags: int, corrid: int | str, ready: bool = True
) -> dict[str, np.ndarray]:
    shape = [1, 1] if spec.batched else [1]
    values = {
        START: ready and bool(flags & FLAG_START),
        END: ready and bool(flags & FLAG_END),
        READY: ready,
    }
    out: dict[str, np.ndarray] = {}
    for control in spec.controls:
        out[control.name] = _boolean(control, values[control.kind], shape)
    if spec.corrid is not None:
        out[spec.corrid.name] = corrid_tensor(spec.corrid, corrid if ready else 0, shape)
    return out


def _boolean(control: Control, value: bool, shape: list[int]) -> np.ndarray:
    chosen = control.true_value if value else control.false_value
    dtype = datatypes.BY_NAME[control.datatype].dtype
    return np.full(shape, chosen, dtype=dtype)


def corrid_tensor(control: Control, corrid: int | str, shape: list[int]) -> np.ndarray:
    if control.datatype == "BYTES":
        text = corrid if isinstance(corrid, str) else ("" if corrid == 0 else str(corrid))
        array = np.empty(1, dtype=object)
        array[0] = text.encode("utf-8")
        return array.reshape(shape)
    dtype = datatypes.BY_NAME[control.datatype].dtype
    assert dtype is not None  # only BYTES has no NumPy dtype, handled above
    value = int(corrid) if not isinstance(corrid, str) else 0
    raw = np.array([value & (2**64 - 1)], dtype="<u8").view(np.uint8)[: dtype.itemsize]
    return raw.view(dtype).reshape(shape).copy()
