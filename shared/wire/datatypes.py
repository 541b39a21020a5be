"""The KServe v2 datatype table: wire name, config.pbtxt name, NumPy dtype, element size."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

try:  # BF16 has no NumPy dtype of its own; ml_dtypes (an onnx dependency) provides one.
    from ml_dtypes import bfloat16 as _bf16
except ImportError:  # pragma: no cover - ml_dtypes ships with onnx and tritonclient
    _bf16 = None


class DataType(NamedTuple):
    name: str  # KServe v2 / API name, e.g. "FP32"
    config_name: str  # config.pbtxt name, e.g. "TYPE_FP32"
    dtype: np.dtype | None  # little-endian NumPy dtype; None for BYTES (object)
    itemsize: int  # bytes per element; 0 for BYTES (variable)


def _lt(code: str) -> np.dtype:
    return np.dtype(code).newbyteorder("<")


_TABLE = [
    DataType("BOOL", "TYPE_BOOL", np.dtype(np.bool_), 1),
    DataType("UINT8", "TYPE_UINT8", np.dtype(np.uint8), 1),
    DataType("UINT16", "TYPE_UINT16", _lt("u2"), 2),
    DataType("UINT32", "TYPE_UINT32", _lt("u4"), 4),
    DataType("UINT64", "TYPE_UINT64", _lt("u8"), 8),
    DataType("INT8", "TYPE_INT8", np.dtype(np.int8), 1),
    DataType("INT16", "TYPE_INT16", _lt("i2"), 2),
    DataType("INT32", "TYPE_INT32", _lt("i4"), 4),
    DataType("INT64", "TYPE_INT64", _lt("i8"), 8),
    DataType("FP16", "TYPE_FP16", _lt("f2"), 2),
    DataType("FP32", "TYPE_FP32", _lt("f4"), 4),
    DataType("FP64", "TYPE_FP64", _lt("f8"), 8),
    DataType("BF16", "TYPE_BF16", np.dtype(_bf16) if _bf16 is not None else None, 2),
    DataType("BYTES", "TYPE_STRING", None, 0),
]

BY_NAME: dict[str, DataType] = {t.name: t for t in _TABLE}
BY_CONFIG_NAME: dict[str, DataType] = {t.config_name: t for t in _TABLE}
NAMES: tuple[str, ...] = tuple(BY_NAME)


def from_config_name(config_name: str) -> DataType:
    return BY_CONFIG_NAME[config_name]


def from_numpy(dtype: np.dtype) -> str:
    """The v2 datatype name of a NumPy dtype (object and string dtypes are BYTES)."""
    dtype = np.dtype(dtype)
    if dtype.kind in "OSU":
        return "BYTES"
    if _bf16 is not None and dtype == np.dtype(_bf16):
        return "BF16"
    for t in _TABLE:
        if t.name == "BF16":
            continue  # matched by equality above; other 2-byte void dtypes are not BF16
        if t.dtype is not None and t.dtype.kind == dtype.kind and t.itemsize == dtype.itemsize:
            return t.name
    raise ValueError(f"NumPy dtype {dtype} has no KServe v2 datatype")
