"""KServe v2 HTTP bodies: JSON tensors and Triton's binary tensor data extension.

Request bodies are built by ``tritonclient`` itself (``generate_request_body``), so what the codec
accepts is what real clients send; responses are read back with ``parse_response_body``, so what
the codec writes is what real clients read. Every malformed body is INVALID_ARG with a message
that names the offending input (where there is one) and what was expected.
"""

from __future__ import annotations

import gzip
import json
import zlib
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import tritonclient.http as httpclient

from gateway.rest.codec import encode_infer_response, parse_infer_request
from gateway.rest.request_limits import decompress as bounded_decompress
from shared.wire import tensors
from shared.wire.envelope import Tensor
from shared.wire.errors import ConchError, ErrorCode

Client = httpclient.InferenceServerClient


def triton_body(
    inputs: list[httpclient.InferInput],
    outputs: list[httpclient.InferRequestedOutput] | None = None,
    **kwargs: Any,
) -> tuple[bytes, str | None]:
    """The body and Inference-Header-Content-Length tritonclient would send."""
    body, length = Client.generate_request_body(inputs, outputs, **kwargs)
    return body, None if length is None else str(length)


def infer_input(
    name: str, array: np.ndarray, datatype: str, binary: bool = True
) -> httpclient.InferInput:
    item = httpclient.InferInput(name, list(array.shape), datatype)
    item.set_data_from_numpy(array, binary_data=binary)
    return item


def hand_body(header: dict[str, Any], *blobs: bytes) -> tuple[bytes, str]:
    """A JSON header followed by binary blobs, with its header length."""
    head = json.dumps(header).encode()
    return head + b"".join(blobs), str(len(head))


def one_input(**fields: Any) -> dict[str, Any]:
    entry = {"name": "INPUT0", "shape": [1, 4], "datatype": "INT32", **fields}
    return {"inputs": [entry]}


def invalid_message(body: bytes, header_length: str | None) -> str:
    with pytest.raises(ConchError) as exc_info:
        parse_infer_request(body, header_length)
    assert exc_info.value.code is ErrorCode.INVALID_ARG
    return exc_info.value.message


INT32_ROW = np.arange(4, dtype=np.int32).reshape(1, 4)

# One array per datatype family tritonclient can send; BF16 uses ml_dtypes, as tritonclient needs.
ARRAYS: dict[str, np.ndarray] = {
    "BOOL": np.array([[True, False, True]]),
    "UINT8": np.array([[0, 7, 255]], dtype=np.uint8),
    "UINT64": np.array([[0, 2**63 + 5]], dtype=np.uint64),
    "INT8": np.array([[-128, 0, 127]], dtype=np.int8),
    "INT16": np.array([[-3, 300]], dtype=np.int16),
    "INT32": np.arange(-8, 8, dtype=np.int32).reshape(2, 8),
    "INT64": np.array([[-(2**40), 2**40]], dtype=np.int64),
    "FP16": np.array([[0.5, -2.0, 1024.0]], dtype=np.float16),
    "FP32": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4),
    "FP64": np.array([[1.0 / 3.0, -1e300]], dtype=np.float64),
    "BF16": np.array([[1.5, -2.0, 256.0]], dtype=ml_dtypes.bfloat16),
}
JSON_ABLE = sorted(set(ARRAYS) - {"BF16"})  # tritonclient sends BF16 only as binary


# --- requests tritonclient builds --------------------------------------------------------------


@pytest.mark.parametrize("datatype", sorted(ARRAYS))
def test_binary_input_is_the_clients_bytes_unchanged(datatype: str) -> None:
    array = ARRAYS[datatype]
    body, length = triton_body([infer_input("X", array, datatype)])
    assert length is not None
    parsed = parse_infer_request(body, length)
    [given] = parsed.inputs
    assert (given.name, given.datatype, given.shape) == ("X", datatype, list(array.shape))
    assert given.data == array.tobytes()
    assert given.data == body[int(length) :]


@pytest.mark.parametrize("datatype", JSON_ABLE)
def test_json_input_becomes_little_endian_bytes(datatype: str) -> None:
    array = ARRAYS[datatype]
    body, length = triton_body([infer_input("X", array, datatype, binary=False)])
    assert length is None
    [given] = parse_infer_request(body, length).inputs
    assert given.shape == list(array.shape)
    assert given.data == array.astype(array.dtype.newbyteorder("<")).tobytes()


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_bytes_input_from_tritonclient(binary: bool) -> None:
    array = np.array([[b"hello", b"", "wörld".encode()]], dtype=np.object_)
    body, length = triton_body([infer_input("TEXT", array, "BYTES", binary=binary)])
    [given] = parse_infer_request(body, length).inputs
    assert given.datatype == "BYTES"
    assert given.shape == [1, 3]
    assert tensors.deserialize_bytes(given.data) == [b"hello", b"", "wörld".encode()]
    assert np.array_equal(tensors.to_numpy(given), array)


def test_mixed_json_and_binary_inputs_keep_their_order_and_offsets() -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.arange(16, 32, dtype=np.int32).reshape(1, 16)
    c = np.array([[b"xy", b"z"]], dtype=np.object_)
    d = np.full((2, 3), 7.5, dtype=np.float32)
    body, length = triton_body(
        [
            infer_input("A", a, "INT32"),
            infer_input("B", b, "INT32", binary=False),
            infer_input("C", c, "BYTES"),
            infer_input("D", d, "FP32"),
        ]
    )
    parsed = parse_infer_request(body, length)
    assert [t.name for t in parsed.inputs] == ["A", "B", "C", "D"]
    assert np.array_equal(tensors.to_numpy(parsed.inputs[0]), a)
    assert np.array_equal(tensors.to_numpy(parsed.inputs[1]), b)
    assert np.array_equal(tensors.to_numpy(parsed.inputs[2]), c)
    assert np.array_equal(tensors.to_numpy(parsed.inputs[3]), d)


def test_request_id_priority_timeout_and_parameters_are_kept() -> None:
    body, length = triton_body(
        [infer_input("INPUT0", INT32_ROW, "INT32")],
        request_id="req-42",
        priority=2,
        timeout=1500,
        parameters={"custom": "value", "n": 3},
    )
    parsed = parse_infer_request(body, length)
    assert parsed.id == "req-42"
    assert parsed.parameters == {"priority": 2, "timeout": 1500, "custom": "value", "n": 3}
    assert parsed.raw_body is None


def test_sequence_parameters_are_kept() -> None:
    body, length = triton_body(
        [infer_input("INPUT0", INT32_ROW, "INT32")],
        sequence_id=77,
        sequence_start=True,
        sequence_end=False,
    )
    params = parse_infer_request(body, length).parameters
    assert params["sequence_id"] == 77
    assert params["sequence_start"] is True


def test_requested_outputs_carry_their_binary_choice() -> None:
    body, length = triton_body(
        [infer_input("INPUT0", INT32_ROW, "INT32")],
        [
            httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
            httpclient.InferRequestedOutput("OUTPUT1", binary_data=False),
        ],
    )
    parsed = parse_infer_request(body, length)
    assert [(o.name, o.binary) for o in parsed.outputs] == [("OUTPUT0", True), ("OUTPUT1", False)]


def test_class_count_parameter_of_an_output_is_kept() -> None:
    body, length = triton_body(
        [infer_input("INPUT0", INT32_ROW, "INT32")],
        [httpclient.InferRequestedOutput("OUTPUT0", class_count=3)],
    )
    [output] = parse_infer_request(body, length).outputs
    assert output.parameters["classification"] == 3


def test_binary_data_output_sets_the_default_and_is_not_a_model_parameter() -> None:
    header = {
        **one_input(data=[1, 2, 3, 4]),
        "parameters": {"binary_data_output": True, "priority": 1},
        "outputs": [{"name": "A"}, {"name": "B", "parameters": {"binary_data": False}}],
    }
    parsed = parse_infer_request(json.dumps(header).encode(), None)
    assert parsed.binary_default is True
    assert [(o.name, o.binary) for o in parsed.outputs] == [("A", True), ("B", False)]
    assert parsed.parameters == {"priority": 1}


def test_outputs_default_to_json_without_binary_data_output() -> None:
    header = {**one_input(data=[1, 2, 3, 4]), "outputs": [{"name": "A"}]}
    parsed = parse_infer_request(json.dumps(header).encode(), None)
    assert parsed.binary_default is False
    assert parsed.outputs[0].binary is False


def test_nested_json_data_is_accepted() -> None:
    header = {
        "inputs": [{"name": "M", "shape": [2, 2], "datatype": "FP32", "data": [[1, 2], [3, 4]]}]
    }
    [given] = parse_infer_request(json.dumps(header).encode(), None).inputs
    assert given.data == np.array([1, 2, 3, 4], dtype="<f4").tobytes()


def test_empty_tensor_with_zero_binary_bytes() -> None:
    body, length = hand_body(
        {
            "inputs": [
                {
                    "name": "E",
                    "shape": [0, 4],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 0},
                }
            ]
        }
    )
    [given] = parse_infer_request(body, length).inputs
    assert given.data == b""
    assert given.shape == [0, 4]


def test_header_length_equal_to_the_body_means_no_binary_part() -> None:
    body = json.dumps(one_input(data=[0, 1, 2, 3])).encode()
    [given] = parse_infer_request(body, str(len(body))).inputs
    assert given.data == INT32_ROW.tobytes()


def test_header_length_0_is_a_raw_binary_request() -> None:
    parsed = parse_infer_request(b"\x01\x02\x03\x04", "0")
    assert parsed.raw_body == b"\x01\x02\x03\x04"
    assert parsed.inputs == []
    assert parsed.binary_default is True


# --- malformed requests ------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["abc", "1.5", "", "0x10"])
def test_non_integer_header_length_is_invalid(value: str) -> None:
    body = json.dumps(one_input(data=[1, 2, 3, 4])).encode()
    message = invalid_message(body, value)
    assert "Inference-Header-Content-Length" in message
    assert f"'{value}'" in message


@pytest.mark.parametrize("delta", [1, 1000])
def test_header_length_past_the_body_is_invalid(delta: int) -> None:
    body = json.dumps(one_input(data=[1, 2, 3, 4])).encode()
    message = invalid_message(body, str(len(body) + delta))
    assert "Inference-Header-Content-Length" in message
    assert f"{len(body)} bytes" in message


def test_negative_header_length_is_invalid() -> None:
    body = json.dumps(one_input(data=[1, 2, 3, 4])).encode()
    assert "Inference-Header-Content-Length is -1" in invalid_message(body, "-1")


def test_header_length_cutting_the_json_short_is_invalid() -> None:
    body, length = triton_body([infer_input("INPUT0", INT32_ROW, "INT32")])
    assert length is not None
    message = invalid_message(body, str(int(length) - 3))
    assert "JSON" in message or "malformed" in message


def test_binary_size_not_matching_the_shape_names_the_input() -> None:
    body, length = hand_body(one_input(parameters={"binary_data_size": 12}), b"\x00" * 12)
    message = invalid_message(body, length)
    assert "'INPUT0'" in message
    assert "12 bytes" in message and "16" in message and "INT32" in message


def test_binary_size_past_the_body_names_the_input() -> None:
    body, length = hand_body(one_input(parameters={"binary_data_size": 16}), b"\x00" * 10)
    message = invalid_message(body, length)
    assert "'INPUT0'" in message
    assert "binary_data_size 16" in message and "10 bytes" in message


def test_binary_size_without_a_binary_part_names_the_input() -> None:
    body = json.dumps(one_input(parameters={"binary_data_size": 16})).encode()
    message = invalid_message(body, None)
    assert "'INPUT0'" in message and "binary_data_size 16" in message


def test_second_input_overrunning_the_binary_part_is_named() -> None:
    header = {
        "inputs": [
            {"name": "A", "shape": [1], "datatype": "INT32", "parameters": {"binary_data_size": 4}},
            {"name": "B", "shape": [2], "datatype": "INT32", "parameters": {"binary_data_size": 8}},
        ]
    }
    body, length = hand_body(header, b"\x00" * 10)
    message = invalid_message(body, length)
    assert "'B'" in message and "6 bytes" in message


def test_leftover_binary_bytes_are_invalid() -> None:
    body, length = triton_body([infer_input("INPUT0", INT32_ROW, "INT32")])
    message = invalid_message(body + b"\x00\x00\x00", length)
    assert "3 bytes" in message
    assert "binary_data_size" in message


def test_binary_part_without_any_binary_input_is_invalid() -> None:
    body, length = hand_body(one_input(data=[1, 2, 3, 4]), b"\xff" * 8)
    assert "8 bytes" in invalid_message(body, length)


def test_both_data_and_binary_data_size_names_the_input() -> None:
    body, length = hand_body(
        one_input(data=[1, 2, 3, 4], parameters={"binary_data_size": 16}), INT32_ROW.tobytes()
    )
    message = invalid_message(body, length)
    assert "'INPUT0'" in message
    assert "'data'" in message and "'binary_data_size'" in message


def test_neither_data_nor_binary_data_size_names_the_input() -> None:
    message = invalid_message(json.dumps(one_input()).encode(), None)
    assert "'INPUT0'" in message and "neither" in message


@pytest.mark.parametrize("size", [-4, "16", 16.0, None, [16]])
def test_bad_binary_data_size_names_the_input(size: Any) -> None:
    body, length = hand_body(one_input(parameters={"binary_data_size": size}), INT32_ROW.tobytes())
    message = invalid_message(body, length)
    assert "'INPUT0'" in message


def test_boolean_binary_data_size_is_invalid() -> None:
    header = {
        "inputs": [
            {
                "name": "FLAG",
                "shape": [1],
                "datatype": "BOOL",
                "parameters": {"binary_data_size": True},
            }
        ]
    }
    body, length = hand_body(header, b"\x01")
    assert "'FLAG'" in invalid_message(body, length)


@pytest.mark.parametrize("datatype", ["FLOAT32", "int32", "STRING", "TYPE_INT32", ""])
def test_unknown_datatype_names_the_input_and_the_known_ones(datatype: str) -> None:
    header = {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": datatype, "data": [1]}]}
    message = invalid_message(json.dumps(header).encode(), None)
    assert "'INPUT0'" in message
    assert f"'{datatype}'" in message
    assert "INT32" in message and "BYTES" in message


@pytest.mark.parametrize("shape", [[-1, 4], [1, -4], [-1]])
def test_negative_shape_names_the_input(shape: list[int]) -> None:
    header = {
        "inputs": [{"name": "INPUT0", "shape": shape, "datatype": "INT32", "data": [1, 2, 3, 4]}]
    }
    message = invalid_message(json.dumps(header).encode(), None)
    assert "'INPUT0'" in message
    assert str(shape) in message


@pytest.mark.parametrize(
    "body",
    [
        b"{",
        b"not json",
        b'{"inputs": [}',
        b"\xff\xfe",
        b'{"inputs": [{"name": "X", "shape": [1], "datatype": "INT32", "data": [1]}]} trailing',
    ],
    ids=["truncated", "text", "bad-array", "binary", "trailing"],
)
def test_malformed_json_is_invalid(body: bytes) -> None:
    message = invalid_message(body, None)
    assert "JSON" in message or "malformed" in message


@pytest.mark.parametrize(
    "header",
    [
        [],
        {"inputs": 5},
        {},
        {"inputs": [{"name": "INPUT0", "datatype": "INT32", "data": [1]}]},
        {"inputs": [{"name": "INPUT0", "shape": [1.5], "datatype": "INT32", "data": [1]}]},
        {"inputs": [{"name": 7, "shape": [1], "datatype": "INT32", "data": [1]}]},
        {"inputs": [], "outputs": [{"parameters": {}}]},
    ],
    ids=[
        "array",
        "inputs-not-list",
        "no-inputs",
        "no-shape",
        "float-dim",
        "name-int",
        "output-no-name",
    ],
)
def test_wrongly_shaped_request_json_is_invalid(header: Any) -> None:
    message = invalid_message(json.dumps(header).encode(), None)
    assert message.startswith("malformed inference request")


def test_empty_body_is_invalid() -> None:
    assert "empty" in invalid_message(b"", None)


def test_input_given_twice_is_named() -> None:
    header = {"inputs": [one_input(data=[1, 2, 3, 4])["inputs"][0]] * 2}
    message = invalid_message(json.dumps(header).encode(), None)
    assert "'INPUT0'" in message and "more than once" in message


def test_json_element_count_not_matching_the_shape_names_the_input() -> None:
    message = invalid_message(json.dumps(one_input(data=[1, 2, 3])).encode(), None)
    assert "'INPUT0'" in message
    assert "4" in message and "3" in message


def test_json_values_of_the_wrong_kind_name_the_input() -> None:
    message = invalid_message(json.dumps(one_input(data=[1.5, 2, 3, 4])).encode(), None)
    assert "'INPUT0'" in message


def test_truncated_binary_bytes_element_names_the_input() -> None:
    blob = tensors.serialize_bytes([b"abcdef"])[:-2]
    header = {
        "inputs": [
            {
                "name": "TEXT",
                "shape": [1],
                "datatype": "BYTES",
                "parameters": {"binary_data_size": len(blob)},
            }
        ]
    }
    body, length = hand_body(header, blob)
    message = invalid_message(body, length)
    assert "'TEXT'" in message and "truncated" in message


def test_binary_bytes_element_count_not_matching_the_shape_names_the_input() -> None:
    blob = tensors.serialize_bytes([b"a", b"b", b"c"])
    header = {
        "inputs": [
            {
                "name": "TEXT",
                "shape": [2],
                "datatype": "BYTES",
                "parameters": {"binary_data_size": len(blob)},
            }
        ]
    }
    body, length = hand_body(header, blob)
    message = invalid_message(body, length)
    assert "'TEXT'" in message and "3" in message and "2" in message


# --- Content-Encoding ----------------------------------------------------------------------------

LIMIT = 64 * 1024 * 1024


def decompress(body: bytes, encoding: str | None) -> bytes:
    return bounded_decompress(body, encoding, LIMIT)


def test_gzip_and_deflate_bodies_are_decompressed() -> None:
    body, _ = triton_body([infer_input("INPUT0", INT32_ROW, "INT32", binary=False)])
    assert decompress(gzip.compress(body), "gzip") == body
    assert decompress(zlib.compress(body), "deflate") == body


@pytest.mark.parametrize("encoding", [None, "", "identity"])
def test_identity_bodies_are_unchanged(encoding: str | None) -> None:
    assert decompress(b"{}", encoding) == b"{}"


def test_corrupt_compressed_body_is_invalid() -> None:
    with pytest.raises(ConchError) as exc_info:
        decompress(b"definitely not gzip", "gzip")
    assert exc_info.value.code is ErrorCode.INVALID_ARG
    assert "gzip" in exc_info.value.message


def test_unsupported_content_encoding_is_invalid() -> None:
    with pytest.raises(ConchError) as exc_info:
        decompress(b"...", "br")
    assert exc_info.value.code is ErrorCode.INVALID_ARG
    assert "'br'" in exc_info.value.message


# --- responses, read back by tritonclient --------------------------------------------------------


def read_back(body: bytes, header_length: int | None) -> Any:
    return Client.parse_response_body(body, header_length=header_length)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
@pytest.mark.parametrize("datatype", sorted(ARRAYS))
def test_response_round_trips_through_tritonclient(datatype: str, binary: bool) -> None:
    array = ARRAYS[datatype]
    out = tensors.from_numpy("OUT", array, datatype)
    body, length = encode_infer_response("m", 3, "req-1", [out], {"OUT": binary})
    assert (length is not None) is binary
    result = read_back(body, length)
    got = result.as_numpy("OUT")
    assert got.shape == array.shape
    if datatype == "BF16" and not binary:
        # JSON carries BF16 as numbers; tritonclient reads them back as FP32 values.
        assert np.array_equal(got.astype(np.float32), array.astype(np.float32))
    else:
        assert np.array_equal(got, array)
    response = result.get_response()
    assert response["model_name"] == "m"
    assert response["model_version"] == "3"
    assert response["id"] == "req-1"


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_bytes_response_round_trips(binary: bool) -> None:
    array = np.array([[b"alpha", b""], [b"gamma", b"d"]], dtype=np.object_)
    out = tensors.from_numpy("TEXT", array, "BYTES")
    body, length = encode_infer_response("m", 1, "", [out], {"TEXT": binary})
    got = read_back(body, length).as_numpy("TEXT")
    assert got.shape == (2, 2)
    assert [v if isinstance(v, bytes) else v.encode() for v in got.ravel()] == list(array.ravel())


def test_mixed_binary_and_json_outputs_keep_their_offsets() -> None:
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    b = np.array([[0.5, 1.5]], dtype=np.float64)
    c = np.array([[b"x", b"yz"]], dtype=np.object_)
    d = np.array([[True, False]])
    outs = [
        tensors.from_numpy("A", a),
        tensors.from_numpy("B", b),
        tensors.from_numpy("C", c, "BYTES"),
        tensors.from_numpy("D", d),
    ]
    body, length = encode_infer_response(
        "m", 1, "", outs, {"A": True, "B": False, "C": True, "D": True}
    )
    assert length is not None
    result = read_back(body, length)
    assert np.array_equal(result.as_numpy("A"), a)
    assert np.array_equal(result.as_numpy("B"), b)
    assert np.array_equal(result.as_numpy("C"), c)
    assert np.array_equal(result.as_numpy("D"), d)
    # The binary part is exactly the binary outputs' bytes, in order.
    assert body[length:] == outs[0].data + outs[2].data + outs[3].data


def test_outputs_without_a_binary_choice_are_json() -> None:
    out = tensors.from_numpy("OUT", INT32_ROW)
    body, length = encode_infer_response("m", 1, "", [out], {})
    assert length is None
    assert json.loads(body)["outputs"][0]["data"] == [0, 1, 2, 3]


def test_json_response_is_triton_shaped() -> None:
    out = tensors.from_numpy("OUT", INT32_ROW)
    body, length = encode_infer_response("simple", 1, "", [out], {"OUT": False}, {"seq": 1})
    assert length is None
    assert json.loads(body) == {
        "model_name": "simple",
        "model_version": "1",
        "parameters": {"seq": 1},
        "outputs": [{"name": "OUT", "datatype": "INT32", "shape": [1, 4], "data": [0, 1, 2, 3]}],
    }


def test_binary_output_declares_its_size() -> None:
    out = tensors.from_numpy("OUT", INT32_ROW)
    body, length = encode_infer_response("m", 1, "", [out], {"OUT": True})
    assert length is not None
    header = json.loads(body[:length])
    assert header["outputs"][0]["parameters"] == {"binary_data_size": 16}
    assert "data" not in header["outputs"][0]
    assert len(body) == length + 16


def test_request_id_is_echoed_only_when_given() -> None:
    out = tensors.from_numpy("OUT", INT32_ROW)
    body, _ = encode_infer_response("m", 1, "", [out], {})
    assert "id" not in json.loads(body)
    body, _ = encode_infer_response("m", 1, "abc", [out], {})
    assert read_back(body, None).get_response()["id"] == "abc"


def test_response_with_no_outputs() -> None:
    body, length = encode_infer_response("m", 2, "", [], {})
    assert length is None
    assert read_back(body, None).get_response() == {
        "model_name": "m",
        "model_version": "2",
        "outputs": [],
    }


def test_end_to_end_request_to_response() -> None:
    """What a client sends comes back, byte for byte, when echoed as outputs."""
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    body, length = triton_body(
        [infer_input("INPUT0", a, "INT32")],
        [httpclient.InferRequestedOutput("INPUT0", binary_data=True)],
    )
    parsed = parse_infer_request(body, length)
    echoed = [Tensor("INPUT0", t.datatype, t.shape, t.data) for t in parsed.inputs]
    out_body, out_length = encode_infer_response(
        "echo", 1, parsed.id, echoed, {o.name: o.binary for o in parsed.outputs}
    )
    assert np.array_equal(read_back(out_body, out_length).as_numpy("INPUT0"), a)


# --- issue 12: decompression is bounded ----------------------------------------------------------


def test_a_gzip_bomb_is_refused_at_the_limit() -> None:
    """Before: a 1 MB gzip body inflated to 1 GB on the event loop. Now inflating stops at the
    limit and answers 413 naming it."""
    bomb = gzip.compress(bytes(64 * 1024 * 1024))  # 64 MiB of zeros, ~64 KB compressed
    with pytest.raises(ConchError) as exc_info:
        bounded_decompress(bomb, "gzip", 1024 * 1024)
    assert exc_info.value.code is ErrorCode.PAYLOAD_TOO_LARGE
    assert "1048576 bytes" in exc_info.value.message


def test_a_body_at_the_limit_inflates_whole() -> None:
    body = bytes(range(256)) * 4096  # 1 MiB
    assert bounded_decompress(gzip.compress(body), "gzip", len(body)) == body
    assert bounded_decompress(zlib.compress(body), "deflate", len(body)) == body
    with pytest.raises(ConchError):
        bounded_decompress(zlib.compress(body), "deflate", len(body) - 1)


def test_concatenated_gzip_members_are_one_body() -> None:
    assert bounded_decompress(gzip.compress(b"ab") + gzip.compress(b"cd"), "gzip", 10) == b"abcd"


def test_a_truncated_compressed_body_is_invalid() -> None:
    with pytest.raises(ConchError) as exc_info:
        bounded_decompress(gzip.compress(bytes(1000))[:-12], "gzip", LIMIT)
    assert exc_info.value.code is ErrorCode.INVALID_ARG
