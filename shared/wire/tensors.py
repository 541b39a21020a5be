"""Tensor codecs: JSON data <-> raw bytes <-> NumPy, without per-element Python loops.

Raw bytes are the wire form of Triton's binary tensor extension (little-endian, row-major; a
BYTES element is a 4-byte little-endian length followed by its bytes), so a binary request's
body slice travels unchanged to the backend.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from shared.wire import datatypes
from shared.wire.envelope import Tensor
from shared.wire.errors import invalid

_LEN = struct.Struct("<I")


def element_count(shape: Sequence[int]) -> int:
    return math.prod(shape) if shape else 1


def expected_byte_size(datatype: str, shape: Sequence[int]) -> int | None:
    """Bytes a fixed-size tensor must have; None for BYTES, whose size depends on its contents."""
    itemsize = datatypes.BY_NAME[datatype].itemsize
    return None if itemsize == 0 else itemsize * element_count(shape)


def serialize_bytes(items: Iterable[bytes | str]) -> bytes:
    parts: list[bytes] = []
    for item in items:
        raw = item.encode("utf-8") if isinstance(item, str) else bytes(item)
        parts.append(_LEN.pack(len(raw)))
        parts.append(raw)
    return b"".join(parts)


def deserialize_bytes(buf: bytes | memoryview, name: str = "tensor") -> list[bytes]:
    view = memoryview(buf)
    items: list[bytes] = []
    offset, end = 0, len(view)
    while offset < end:
        if offset + 4 > end:
            raise invalid(f"BYTES data of '{name}' is truncated: a 4-byte length prefix is cut off")
        (length,) = _LEN.unpack_from(view, offset)
        offset += 4
        if offset + length > end:
            raise invalid(
                f"BYTES data of '{name}' is truncated: an element claims {length} bytes but only "
                f"{end - offset} remain"
            )
        items.append(bytes(view[offset : offset + length]))
        offset += length
    return items


def json_to_bytes(data: Any, datatype: str, shape: Sequence[int], name: str) -> bytes:
    """Convert a JSON ``data`` field (nested or flat) to raw bytes, checking type and count."""
    expected = element_count(shape)
    if datatype == "BYTES":
        flat = _flatten_strings(data, name)
        if len(flat) != expected:
            raise invalid(
                f"unexpected number of elements for input '{name}': shape {list(shape)} needs "
                f"{expected}, 'data' has {len(flat)}"
            )
        return serialize_bytes(flat)
    dt = datatypes.BY_NAME[datatype]
    if dt.dtype is None:
        raise invalid(f"datatype {datatype} of input '{name}' cannot be sent as JSON; use binary")
    try:
        arr = np.asarray(data)
    except ValueError as exc:
        raise invalid(f"'data' of input '{name}' is ragged or malformed: {exc}") from None
    kind = arr.dtype.kind
    if kind == "f" and dt.dtype.kind == "u" and dt.itemsize == 8:
        arr = _as_uint64(data, arr)
        kind = arr.dtype.kind
    if kind == "b" and datatype != "BOOL":
        raise invalid(f"'data' of input '{name}' must hold {datatype} values, got booleans")
    if (
        kind not in "biuf"
        or (kind == "f" and dt.dtype.kind in "biu")
        or (kind in "iuf" and datatype == "BOOL")
    ):
        if arr.size == 0 and kind == "f":
            pass  # np.asarray([]) is float64; an empty tensor has no values to check
        else:
            raise invalid(
                f"'data' of input '{name}' must hold {datatype} values, got {_describe_kind(kind)}"
            )
    if arr.size != expected:
        raise invalid(
            f"unexpected number of elements for input '{name}': shape {list(shape)} needs "
            f"{expected}, 'data' has {arr.size}"
        )
    try:
        out = arr.astype(dt.dtype, copy=False)
    except (OverflowError, ValueError) as exc:
        raise invalid(f"'data' of input '{name}' does not fit {datatype}: {exc}") from None
    if kind in "iu" and dt.dtype.kind in "iu" and not np.array_equal(out, arr):
        raise invalid(f"'data' of input '{name}' has values out of range for {datatype}")
    return out.tobytes()


def _as_uint64(data: Any, guessed: np.ndarray) -> np.ndarray:
    """NumPy guesses float64 for Python ints mixing values >= 2**63 with small ones."""
    exact = np.asarray(data, dtype=object)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in exact.ravel()):
        try:
            return np.asarray(data, dtype=np.uint64)
        except (OverflowError, ValueError):
            return exact
    return guessed


def bytes_to_json(data: bytes, datatype: str) -> list[Any]:
    """Flat JSON list for a response tensor (Triton returns row-major flattened data)."""
    if datatype == "BYTES":
        return [item.decode("utf-8", errors="replace") for item in deserialize_bytes(data)]
    dt = datatypes.BY_NAME[datatype]
    arr = np.frombuffer(data, dtype=dt.dtype)
    if datatype == "BF16":
        arr = arr.astype(np.float32)
    values: list[Any] = arr.tolist()  # 1-D, so a list
    return values


def to_numpy(tensor: Tensor) -> np.ndarray:
    """A read-only view of the tensor's bytes (no copy), or an object array for BYTES."""
    if tensor.datatype == "BYTES":
        items = deserialize_bytes(tensor.data, tensor.name)
        if len(items) != element_count(tensor.shape):
            raise invalid(
                f"BYTES tensor '{tensor.name}' has {len(items)} elements but shape "
                f"{tensor.shape} needs {element_count(tensor.shape)}"
            )
        arr = np.empty(len(items), dtype=object)
        arr[:] = items
        return arr.reshape(tensor.shape)
    dt = datatypes.BY_NAME[tensor.datatype]
    return np.frombuffer(tensor.data, dtype=dt.dtype).reshape(tensor.shape)


def from_numpy(name: str, array: np.ndarray, datatype: str | None = None) -> Tensor:
    datatype = datatype or datatypes.from_numpy(array.dtype)
    if datatype == "BYTES":
        data = serialize_bytes(_as_bytes(item) for item in np.asarray(array).ravel())
    else:
        dt = datatypes.BY_NAME[datatype]
        data = np.ascontiguousarray(array, dtype=dt.dtype).tobytes()
    return Tensor(name=name, datatype=datatype, shape=list(array.shape), data=data)


def _as_bytes(item: Any) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode("utf-8")
    if isinstance(item, np.bytes_):
        return bytes(item)
    return str(item).encode("utf-8")


def _flatten_strings(data: Any, name: str) -> list[bytes | str]:
    out: list[bytes | str] = []
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        elif isinstance(item, str | bytes):
            out.append(item)
        else:
            raise invalid(
                f"'data' of BYTES input '{name}' must hold strings, got {type(item).__name__}"
            )
    return out


def _describe_kind(kind: str) -> str:
    return {
        "b": "booleans",
        "i": "integers",
        "u": "integers",
        "f": "floating-point numbers",
        "U": "strings",
        "S": "strings",
        "O": "mixed or nested values",
    }.get(kind, f"values of kind {kind!r}")
