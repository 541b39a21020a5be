"""Tensor codecs: JSON <-> little-endian bytes <-> NumPy for every KServe v2 datatype.

The bytes are the wire form of Triton's binary extension and travel unchanged to the backend, so
each datatype must produce exactly the bytes NumPy (and tritonclient) would, and bad input must be
rejected at the gateway with a message naming the input and what was expected.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest

from shared.wire import datatypes, tensors
from shared.wire.envelope import Tensor
from shared.wire.errors import ConchError, ErrorCode

BF16 = datatypes.BY_NAME["BF16"].dtype

# Values each datatype represents exactly, so JSON -> bytes -> JSON is the identity.
SAMPLES: dict[str, list[Any]] = {
    "BOOL": [True, False, True, True],
    "UINT8": [0, 1, 128, 255],
    "UINT16": [0, 1, 40000, 65535],
    "UINT32": [0, 7, 3_000_000_000, 4_294_967_295],
    "UINT64": [0, 1, 2**53 + 1, 2**63 - 1],
    "INT8": [-128, -1, 0, 127],
    "INT16": [-32768, -2, 3, 32767],
    "INT32": [-(2**31), -5, 6, 2**31 - 1],
    "INT64": [-(2**63), -(2**53) - 1, 42, 2**63 - 1],
    "FP16": [0.5, -2.0, 1024.0, 65504.0],
    "FP32": [0.25, -1.5, 2.0**100, 0.0],
    "FP64": [0.1, -1.5e300, 1.0 / 3.0, -0.0],
    "BF16": [1.5, -2.0, 256.0, 0.0078125],
}
FIXED_SIZE = sorted(SAMPLES)


def error_message(exc_info: pytest.ExceptionInfo[ConchError]) -> str:
    assert exc_info.value.code is ErrorCode.INVALID_ARG
    return exc_info.value.message


def expected_bytes(datatype: str, values: list[Any]) -> bytes:
    """What NumPy itself makes of the values: the reference wire form."""
    return np.array(values, dtype=datatypes.BY_NAME[datatype].dtype).tobytes()


# --- sizes ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "count"), [([], 1), ([4], 4), ([2, 3], 6), ([0, 5], 0), ([1, 1, 1], 1)]
)
def test_element_count(shape: list[int], count: int) -> None:
    assert tensors.element_count(shape) == count


@pytest.mark.parametrize(
    ("datatype", "shape", "size"),
    [
        ("BOOL", [3], 3),
        ("UINT8", [2, 2], 4),
        ("INT16", [5], 10),
        ("FP16", [2, 3], 12),
        ("BF16", [7], 14),
        ("FP32", [2, 3], 24),
        ("INT64", [3], 24),
        ("FP64", [], 8),
        ("FP32", [0, 16], 0),
        ("BYTES", [4], None),
    ],
)
def test_expected_byte_size(datatype: str, shape: list[int], size: int | None) -> None:
    assert tensors.expected_byte_size(datatype, shape) == size


# --- every datatype round-trips ---------------------------------------------------------------


@pytest.mark.parametrize("datatype", FIXED_SIZE)
def test_json_to_bytes_matches_numpy_and_round_trips(datatype: str) -> None:
    values = SAMPLES[datatype]
    raw = tensors.json_to_bytes(values, datatype, [2, 2], "x")
    assert raw == expected_bytes(datatype, values)
    assert len(raw) == tensors.expected_byte_size(datatype, [2, 2])
    back = tensors.bytes_to_json(raw, datatype)
    assert back == values
    assert all(type(a) is type(b) for a, b in zip(back, values, strict=True))


@pytest.mark.parametrize("datatype", FIXED_SIZE)
def test_numpy_round_trip_keeps_bytes_dtype_and_shape(datatype: str) -> None:
    dtype = datatypes.BY_NAME[datatype].dtype
    array = np.array(SAMPLES[datatype], dtype=dtype).reshape(2, 2)
    tensor = tensors.from_numpy("x", array)
    assert (tensor.name, tensor.datatype, tensor.shape) == ("x", datatype, [2, 2])
    assert tensor.data == array.tobytes()
    back = tensors.to_numpy(tensor)
    assert back.dtype == dtype
    assert back.shape == (2, 2)
    assert np.array_equal(back.astype(np.float64), array.astype(np.float64))
    assert datatypes.from_numpy(back.dtype) == datatype


@pytest.mark.parametrize("datatype", FIXED_SIZE)
def test_to_numpy_is_a_read_only_view_not_a_copy(datatype: str) -> None:
    raw = expected_bytes(datatype, SAMPLES[datatype])
    array = tensors.to_numpy(Tensor(name="x", datatype=datatype, shape=[4], data=raw))
    assert not array.flags.writeable
    assert array.base is not None  # a view over the message's bytes
    assert array.tobytes() == raw


def test_nested_json_data_equals_flat_data() -> None:
    flat = tensors.json_to_bytes([1, 2, 3, 4, 5, 6], "INT32", [2, 3], "x")
    nested = tensors.json_to_bytes([[1, 2, 3], [4, 5, 6]], "INT32", [2, 3], "x")
    assert flat == nested == struct.pack("<6i", 1, 2, 3, 4, 5, 6)


def test_integers_are_accepted_for_float_inputs() -> None:
    assert tensors.json_to_bytes([1, -2], "FP32", [2], "x") == struct.pack("<2f", 1.0, -2.0)


def test_little_endian_on_the_wire() -> None:
    assert tensors.json_to_bytes([1], "INT32", [1], "x") == b"\x01\x00\x00\x00"
    assert tensors.json_to_bytes([1.0], "FP32", [1], "x") == b"\x00\x00\x80\x3f"


def test_empty_tensor_has_no_bytes() -> None:
    assert tensors.json_to_bytes([], "INT32", [0], "x") == b""
    assert tensors.json_to_bytes([], "FP32", [0, 3], "x") == b""
    assert tensors.bytes_to_json(b"", "INT32") == []


def test_scalar_shape_holds_one_element() -> None:
    assert tensors.json_to_bytes([7], "INT64", [], "x") == struct.pack("<q", 7)


def test_from_numpy_converts_big_endian_and_non_contiguous_arrays() -> None:
    big = np.array([1, 2], dtype=">i4")
    assert tensors.from_numpy("x", big).data == struct.pack("<2i", 1, 2)
    transposed = np.arange(6, dtype=np.int32).reshape(2, 3).T  # logical order 0 3 1 4 2 5
    tensor = tensors.from_numpy("x", transposed)
    assert tensor.shape == [3, 2]
    assert tensor.data == struct.pack("<6i", 0, 3, 1, 4, 2, 5)


def test_from_numpy_with_explicit_datatype_converts() -> None:
    tensor = tensors.from_numpy("x", np.array([1.5, 2.0], dtype=np.float64), "FP32")
    assert tensor.datatype == "FP32"
    assert tensor.data == struct.pack("<2f", 1.5, 2.0)


# --- BOOL, FP16, BF16 -------------------------------------------------------------------------


def test_bool_is_one_byte_per_element() -> None:
    raw = tensors.json_to_bytes([[True, False], [False, True]], "BOOL", [2, 2], "flags")
    assert raw == b"\x01\x00\x00\x01"
    array = tensors.to_numpy(Tensor("flags", "BOOL", [2, 2], raw))
    assert array.dtype == np.bool_
    assert array.tolist() == [[True, False], [False, True]]
    assert tensors.bytes_to_json(raw, "BOOL") == [True, False, False, True]


def test_fp16_uses_ieee_half_precision() -> None:
    raw = tensors.json_to_bytes([1.0, -2.0, 0.5], "FP16", [3], "x")
    assert raw == b"\x00\x3c\x00\xc0\x00\x38"
    assert tensors.bytes_to_json(raw, "FP16") == [1.0, -2.0, 0.5]


def test_bf16_via_numpy_keeps_the_top_half_of_fp32() -> None:
    raw = tensors.json_to_bytes([1.5, -2.0], "BF16", [2], "x")
    # bfloat16 is the upper 16 bits of the float32 bit pattern.
    assert raw == struct.pack("<2H", 0x3FC0, 0xC000)  # float32 0x3FC00000 and 0xC0000000
    assert tensors.bytes_to_json(raw, "BF16") == [1.5, -2.0]

    array = np.array([[0.25, 3.0]], dtype=np.float32).astype(BF16)
    tensor = tensors.from_numpy("y", array)
    assert (tensor.datatype, tensor.shape, tensor.data) == ("BF16", [1, 2], array.tobytes())
    back = tensors.to_numpy(tensor)
    assert back.dtype == BF16
    assert back.astype(np.float32).tolist() == [[0.25, 3.0]]

    converted = tensors.from_numpy("z", np.array([1.5], dtype=np.float32), "BF16")
    assert converted.data == raw[:2]


# --- BYTES ------------------------------------------------------------------------------------


def test_bytes_serialization_is_length_prefixed() -> None:
    raw = tensors.serialize_bytes(["ab", b"", "é", b"\x00\xff"])
    assert raw == (
        b"\x02\x00\x00\x00ab"
        + b"\x00\x00\x00\x00"
        + b"\x02\x00\x00\x00\xc3\xa9"
        + b"\x02\x00\x00\x00\x00\xff"
    )
    assert tensors.deserialize_bytes(raw) == [b"ab", b"", "é".encode(), b"\x00\xff"]
    assert tensors.deserialize_bytes(memoryview(raw)) == tensors.deserialize_bytes(raw)
    assert tensors.deserialize_bytes(b"") == []


def test_bytes_json_round_trip() -> None:
    raw = tensors.json_to_bytes([["hello", "wörld"], ["", "x"]], "BYTES", [2, 2], "text")
    assert raw == tensors.serialize_bytes(["hello", "wörld", "", "x"])
    assert tensors.bytes_to_json(raw, "BYTES") == ["hello", "wörld", "", "x"]


def test_bytes_to_json_replaces_invalid_utf8() -> None:
    raw = tensors.serialize_bytes([b"ok", b"\xff"])
    assert tensors.bytes_to_json(raw, "BYTES") == ["ok", "\ufffd"]


def test_bytes_numpy_round_trip() -> None:
    tensor = tensors.from_numpy("s", np.array([["a", "bc"], ["", "déf"]]))
    assert (tensor.datatype, tensor.shape) == ("BYTES", [2, 2])
    assert tensor.data == tensors.serialize_bytes(["a", "bc", "", "déf"])
    array = tensors.to_numpy(tensor)
    assert array.dtype == object
    assert array.shape == (2, 2)
    assert array.tolist() == [[b"a", b"bc"], [b"", "déf".encode()]]
    again = tensors.from_numpy("s", array)
    assert again == tensor


def test_bytes_from_numpy_accepts_bytes_and_object_arrays() -> None:
    assert tensors.from_numpy("s", np.array([b"x", b"yz"])).data == tensors.serialize_bytes(
        [b"x", b"yz"]
    )
    mixed = np.array([b"raw", "text", 5], dtype=object)
    assert tensors.from_numpy("s", mixed).data == tensors.serialize_bytes([b"raw", b"text", b"5"])


def test_truncated_length_prefix_is_an_error() -> None:
    raw = tensors.serialize_bytes(["abc"]) + b"\x01\x00"
    with pytest.raises(ConchError) as info:
        tensors.deserialize_bytes(raw, "text")
    assert error_message(info) == (
        "BYTES data of 'text' is truncated: a 4-byte length prefix is cut off"
    )


def test_truncated_element_is_an_error() -> None:
    raw = struct.pack("<I", 10) + b"ab"
    with pytest.raises(ConchError) as info:
        tensors.deserialize_bytes(raw, "text")
    assert error_message(info) == (
        "BYTES data of 'text' is truncated: an element claims 10 bytes but only 2 remain"
    )


def test_truncated_bytes_tensor_fails_in_to_numpy() -> None:
    with pytest.raises(ConchError) as info:
        tensors.to_numpy(Tensor("text", "BYTES", [1], struct.pack("<I", 5) + b"abc"))
    assert "'text' is truncated" in error_message(info)


def test_bytes_input_must_hold_strings() -> None:
    with pytest.raises(ConchError) as info:
        tensors.json_to_bytes(["a", 1], "BYTES", [2], "text")
    assert error_message(info) == "'data' of BYTES input 'text' must hold strings, got int"


def test_bytes_element_count_mismatch() -> None:
    with pytest.raises(ConchError) as info:
        tensors.json_to_bytes(["a", "b", "c"], "BYTES", [2], "text")
    assert error_message(info) == (
        "unexpected number of elements for input 'text': shape [2] needs 2, 'data' has 3"
    )


# --- rejected JSON data -----------------------------------------------------------------------


@pytest.mark.parametrize("datatype", ["INT8", "INT32", "INT64", "UINT8", "UINT64"])
def test_float_data_for_integer_input_is_rejected(datatype: str) -> None:
    with pytest.raises(ConchError) as info:
        tensors.json_to_bytes([1, 2.5], datatype, [2], "ids")
    assert error_message(info) == (
        f"'data' of input 'ids' must hold {datatype} values, got floating-point numbers"
    )


def test_whole_floats_for_integer_input_are_rejected() -> None:
    # Triton's JSON parser checks the JSON type, not the value: 1.0 is not an integer.
    with pytest.raises(ConchError):
        tensors.json_to_bytes([1.0, 2.0], "INT32", [2], "ids")


@pytest.mark.parametrize("data", [[1, 0], [0.0, 1.0]])
def test_numbers_for_bool_input_are_rejected(data: list[Any]) -> None:
    with pytest.raises(ConchError) as info:
        tensors.json_to_bytes(data, "BOOL", [2], "flags")
    assert error_message(info).startswith("'data' of input 'flags' must hold BOOL values, got ")


def test_strings_for_numeric_input_are_rejected() -> None:
    with pytest.raises(ConchError) as info:
        tensors.json_to_bytes(["1", "2"], "FP32", [2], "x")
    assert error_message(info) == "'data' of input 'x' must hold FP32 values, got strings"


def test_null_in_numeric_data_is_rejected() -> None:
    with pytest.raises(ConchError) as info:
        tensors.json_to_bytes([1.0, None], "FP32", [2], "x")
    assert "must hold FP32 values" in error_message(info)


@pytest.mark.parametrize(
    ("data", "shape", "needs", "has"),
    [([1, 2, 3], [2, 2], 4, 3), ([[1, 2], [3, 4]], [3], 3, 4), ([], [1], 1, 0)],
)
def test_element_count_mismatch(data: list[Any], shape: list[int], needs: int, has: int) -> None:
    with pytest.raises(ConchError) as info:
        tensors.json_to_bytes(data, "INT32", shape, "x")
    assert error_message(info) == (
        f"unexpected number of elements for input 'x': shape {shape} needs {needs}, "
        f"'data' has {has}"
    )


def test_ragged_data_is_rejected() -> None:
    with pytest.raises(ConchError) as info:
        tensors.json_to_bytes([[1, 2], [3]], "INT32", [3], "x")
    assert error_message(info).startswith("'data' of input 'x' is ragged or malformed")


@pytest.mark.parametrize(
    ("value", "datatype"),
    [
        (128, "INT8"),
        (-129, "INT8"),
        (256, "UINT8"),
        (70000, "UINT16"),
        (-1, "UINT32"),
        (2**31, "INT32"),
        (-1, "UINT64"),
    ],
)
def test_out_of_range_integers_are_rejected(value: int, datatype: str) -> None:
    with pytest.raises(ConchError) as info:
        tensors.json_to_bytes([value], datatype, [1], "x")
    assert error_message(info) == f"'data' of input 'x' has values out of range for {datatype}"


@pytest.mark.parametrize(("value", "datatype"), [(2**63, "INT64"), (2**64, "UINT64")])
def test_integers_beyond_64_bits_are_rejected(value: int, datatype: str) -> None:
    with pytest.raises(ConchError) as info:
        tensors.json_to_bytes([value], datatype, [1], "x")
    assert error_message(info).startswith("'data' of input 'x' ")


def test_uint64_maximum_alone_is_accepted() -> None:
    assert tensors.json_to_bytes([2**64 - 1], "UINT64", [1], "x") == b"\xff" * 8


# --- known bugs --------------------------------------------------------------------------------


def test_uint64_values_above_int64_mixed_with_small_ones_are_accepted() -> None:
    raw = tensors.json_to_bytes([0, 2**64 - 1, 2**63], "UINT64", [3], "x")
    assert raw == struct.pack("<3Q", 0, 2**64 - 1, 2**63)


@pytest.mark.parametrize("datatype", ["INT32", "FP32"])
def test_booleans_for_numeric_input_are_rejected(datatype: str) -> None:
    with pytest.raises(ConchError):
        tensors.json_to_bytes([True, False], datatype, [2], "x")


def test_bytes_count_not_matching_shape_is_invalid_arg() -> None:
    tensor = Tensor("text", "BYTES", [3], tensors.serialize_bytes([b"a", b"b"]))
    with pytest.raises(ConchError) as info:
        tensors.to_numpy(tensor)
    assert "'text'" in error_message(info)


def test_void_dtype_is_not_bf16() -> None:
    with pytest.raises(ValueError):
        datatypes.from_numpy(np.dtype("V2"))
