"""Triton's classification extension: an output asked for with ``"classification": N`` comes
back as the top N classes of each batch row, BYTES elements ``"value:index"`` or
``"value:index:label"`` when the output's ``label_filename`` gives labels.

As Triton (server ``src/classification.cc``): values print as C++ ``std::to_string`` prints them
(six decimals for floating point), classes sort by value, highest first (ties keep index order),
and the output's shape becomes ``[batch, min(N, classes)]`` (``[min(N, classes)]`` without a batch
dimension). Pure functions over the output's bytes; the labels come from ``gateway.labels``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from shared.wire import datatypes, tensors
from shared.wire.envelope import Tensor
from shared.wire.errors import invalid

PARAMETER = "classification"
# Triton's bound on the elements one classification may sort.
MAX_ELEMENTS = 1_000_000


def requested_count(output: str, parameters: dict[str, Any]) -> int:
    """The N an output asks for (0: not a classification)."""
    value = parameters.get(PARAMETER)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise invalid(
            f"Unable to set 'classification' of output '{output}': expected an integer >= 0, "
            f"got {value!r}"
        )
    return value


def classify(
    tensor: Tensor, count: int, batched: bool, labels: Sequence[str] | None = None
) -> Tensor:
    """The BYTES tensor of the top ``count`` classes per batch row of ``tensor``."""
    spec = datatypes.BY_NAME[tensor.datatype]
    if spec.dtype is None or tensor.datatype in ("BOOL", "FP16", "BF16"):
        raise invalid(
            f"class result not available for output due to unsupported type '{tensor.datatype}'"
        )
    values = np.frombuffer(tensor.data, dtype=spec.dtype)
    if values.size > MAX_ELEMENTS:
        raise invalid("classification output tensor too large")
    rows = tensor.shape[0] if batched and tensor.shape else 1
    per_row = values.size // rows if rows else 0
    kept = min(count, per_row)
    items: list[bytes] = []
    for row in range(rows):
        scores = values[row * per_row : (row + 1) * per_row]
        order = np.argsort(-scores.astype(np.float64), kind="stable")[:kept]
        for index in order:
            text = f"{_number(scores[index])}:{int(index)}"
            if labels is not None and int(index) < len(labels):
                text += f":{labels[int(index)]}"
            items.append(text.encode("utf-8"))
    shape = [rows, kept] if batched and tensor.shape else [kept]
    return Tensor(tensor.name, "BYTES", shape, tensors.serialize_bytes(items))


def _number(value: Any) -> str:
    """C++ std::to_string: integers as they are, floating point with six decimals."""
    if isinstance(value, np.floating):
        return f"{float(value):f}"
    return str(int(value))
