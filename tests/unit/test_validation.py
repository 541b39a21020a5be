"""Checking a parsed request against the model's configuration before anything is enqueued.

Every rejection is INVALID_ARG (HTTP 400) with a message that names the input or output, what was
given and what the model expects, in Triton's wording where Triton has one.
"""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as httpclient

from gateway.core.request import ParsedRequest, RequestedOutput
from gateway.core.validation import ValidRequest, validate
from gateway.rest.codec import parse_infer_request
from shared.model_config import ModelConfig, parse_pbtxt
from shared.wire import tensors
from shared.wire.envelope import Tensor
from shared.wire.errors import ConchError, ErrorCode

# Triton's `simple` model: two INT32 [16] inputs, two outputs, batching up to 8.
SIMPLE_PBTXT = """
    name: "simple"
    platform: "onnxruntime_onnx"
    max_batch_size: 8
    input [
      { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
      { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
    ]
    output [
      { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
      { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
    ]
    dynamic_batching { }
    """
SIMPLE = parse_pbtxt(SIMPLE_PBTXT)

# No batching, a variable dimension, and one FP32 input.
NOBATCH = parse_pbtxt(
    """
    name: "nobatch"
    platform: "onnxruntime_onnx"
    max_batch_size: 0
    input [ { name: "X" data_type: TYPE_FP32 dims: [ 2, -1 ] } ]
    output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2, -1 ] } ]
    """
)

# One fixed-shape input: the only kind that accepts Triton's raw binary request.
SINGLE = parse_pbtxt(
    """
    name: "single"
    platform: "onnxruntime_onnx"
    max_batch_size: 4
    input [ { name: "IMAGE" data_type: TYPE_FP32 dims: [ 3, 2 ] } ]
    output [
      { name: "SCORES" data_type: TYPE_FP32 dims: [ 5 ] },
      { name: "LABEL" data_type: TYPE_INT64 dims: [ 1 ] }
    ]
    """
)

VARIABLE = parse_pbtxt(
    """
    name: "variable"
    platform: "onnxruntime_onnx"
    max_batch_size: 8
    input [
      { name: "TOKENS" data_type: TYPE_INT64 dims: [ -1 ] },
      { name: "MASK" data_type: TYPE_INT64 dims: [ -1 ] optional: true }
    ]
    output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
    """
)


def tensor(name: str, array: np.ndarray, datatype: str | None = None) -> Tensor:
    return tensors.from_numpy(name, array, datatype)


def request(*inputs: Tensor, outputs: tuple[str, ...] = ()) -> ParsedRequest:
    return ParsedRequest(
        id="",
        inputs=list(inputs),
        outputs=[RequestedOutput(name, False) for name in outputs],
        parameters={},
        binary_default=False,
    )


def simple_inputs(batch: int = 1) -> tuple[Tensor, Tensor]:
    a = np.arange(16 * batch, dtype=np.int32).reshape(batch, 16)
    return tensor("INPUT0", a), tensor("INPUT1", a * 2)


def rejected(config: ModelConfig, parsed: ParsedRequest) -> str:
    with pytest.raises(ConchError) as exc_info:
        validate(config, parsed)
    assert exc_info.value.code is ErrorCode.INVALID_ARG
    return exc_info.value.message


# --- accepted requests -------------------------------------------------------------------------


def test_a_valid_request_keeps_its_tensors_and_batch_size() -> None:
    a, b = simple_inputs(batch=3)
    valid = validate(SIMPLE, request(a, b, outputs=("OUTPUT1",)))
    assert isinstance(valid, ValidRequest)
    assert valid.inputs == [a, b]
    assert valid.batch_size == 3
    assert [o.name for o in valid.outputs] == ["OUTPUT1"]


def test_inputs_come_out_in_the_configs_order() -> None:
    a, b = simple_inputs()
    assert [t.name for t in validate(SIMPLE, request(b, a)).inputs] == ["INPUT0", "INPUT1"]


def test_no_requested_outputs_means_all_and_is_valid() -> None:
    assert validate(SIMPLE, request(*simple_inputs())).outputs == []


def test_request_from_tritonclient_is_valid() -> None:
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    inputs = [
        httpclient.InferInput("INPUT0", [2, 16], "INT32"),
        httpclient.InferInput("INPUT1", [2, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a, binary_data=False)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0")]
    body, length = httpclient.InferenceServerClient.generate_request_body(inputs, outputs)
    parsed = parse_infer_request(body, None if length is None else str(length))
    valid = validate(SIMPLE, parsed)
    assert valid.batch_size == 2
    assert np.array_equal(tensors.to_numpy(valid.inputs[1]), a)


def test_shape_signature_ignores_the_batch_dimension() -> None:
    one = validate(SIMPLE, request(*simple_inputs(batch=1)))
    three = validate(SIMPLE, request(*simple_inputs(batch=3)))
    assert one.shape_sig == three.shape_sig


def test_shape_signature_differs_when_a_variable_dimension_differs() -> None:
    short = validate(VARIABLE, request(tensor("TOKENS", np.zeros((1, 5), np.int64))))
    long = validate(VARIABLE, request(tensor("TOKENS", np.zeros((2, 7), np.int64))))
    same = validate(VARIABLE, request(tensor("TOKENS", np.zeros((4, 5), np.int64))))
    assert short.shape_sig != long.shape_sig
    assert short.shape_sig == same.shape_sig


def test_shape_signature_differs_when_an_optional_input_is_left_out() -> None:
    tokens = tensor("TOKENS", np.zeros((1, 5), np.int64))
    mask = tensor("MASK", np.ones((1, 5), np.int64))
    assert (
        validate(VARIABLE, request(tokens)).shape_sig
        != validate(VARIABLE, request(tokens, mask)).shape_sig
    )


def test_optional_input_may_be_left_out() -> None:
    valid = validate(VARIABLE, request(tensor("TOKENS", np.zeros((2, 5), np.int64))))
    assert [t.name for t in valid.inputs] == ["TOKENS"]
    assert valid.batch_size == 2


def test_without_batching_the_shape_is_the_dims_and_batch_size_is_1() -> None:
    x = tensor("X", np.zeros((2, 9), np.float32))
    valid = validate(NOBATCH, request(x))
    assert valid.batch_size == 1
    assert valid.shape_sig == "X:2,9"


def test_batch_size_equal_to_max_batch_size_is_valid() -> None:
    assert validate(SIMPLE, request(*simple_inputs(batch=8))).batch_size == 8


# --- inputs ------------------------------------------------------------------------------------


def test_missing_input_is_named() -> None:
    a, _ = simple_inputs()
    message = rejected(SIMPLE, request(a))
    assert "INPUT1" in message
    assert "simple" in message
    assert "expected 2 inputs but got 1" in message


def test_unexpected_input_is_named_with_the_expected_ones() -> None:
    a, b = simple_inputs()
    extra = tensor("INPUT9", np.zeros((1, 16), np.int32))
    message = rejected(SIMPLE, request(a, b, extra))
    assert "unexpected inference input 'INPUT9'" in message
    assert "INPUT0" in message and "INPUT1" in message


def test_wrong_datatype_names_the_input_the_given_and_the_expected_type() -> None:
    a, _ = simple_inputs()
    b = tensor("INPUT1", np.zeros((1, 16), np.float32))
    message = rejected(SIMPLE, request(a, b))
    assert "'INPUT1'" in message
    assert "'FP32'" in message and "'INT32'" in message


@pytest.mark.parametrize(
    ("shape", "shown"),
    [((1, 15), "[1,15]"), ((16,), "[16]"), ((1, 16, 1), "[1,16,1]"), ((1, 4, 4), "[1,4,4]")],
)
def test_wrong_shape_names_the_input_and_both_shapes(shape: tuple[int, ...], shown: str) -> None:
    a, _ = simple_inputs()
    b = tensor("INPUT1", np.zeros(shape, np.int32))
    message = rejected(SIMPLE, request(a, b))
    assert "'INPUT1'" in message
    assert "Expected [-1,16]" in message
    assert f"got {shown}" in message


def test_scalar_input_for_a_batching_model_is_a_shape_error() -> None:
    a, _ = simple_inputs()
    b = tensor("INPUT1", np.array(3, np.int32))
    assert "'INPUT1'" in rejected(SIMPLE, request(a, b))


def test_without_batching_a_leading_batch_dimension_is_a_shape_error() -> None:
    x = tensor("X", np.zeros((1, 2, 9), np.float32))
    message = rejected(NOBATCH, request(x))
    assert "'X'" in message and "Expected [2,-1]" in message and "got [1,2,9]" in message


def test_fixed_dimension_must_match_even_next_to_a_variable_one() -> None:
    x = tensor("X", np.zeros((3, 9), np.float32))
    assert "'X'" in rejected(NOBATCH, request(x))


def test_batch_larger_than_max_batch_size_names_the_limit() -> None:
    message = rejected(SIMPLE, request(*simple_inputs(batch=9)))
    assert "batch-size must be <= 8" in message
    assert "got 9" in message


def test_batch_of_zero_is_rejected() -> None:
    message = rejected(SIMPLE, request(*simple_inputs(batch=0)))
    assert "batch-size" in message


def test_inputs_disagreeing_on_the_batch_size_are_rejected() -> None:
    a, _ = simple_inputs(batch=2)
    _, b = simple_inputs(batch=3)
    message = rejected(SIMPLE, request(a, b))
    assert "batch size" in message
    assert "[2, 3]" in message


# --- outputs -----------------------------------------------------------------------------------


def test_unknown_requested_output_is_named_with_the_expected_ones() -> None:
    message = rejected(SIMPLE, request(*simple_inputs(), outputs=("OUTPUT0", "OUTPUT7")))
    assert "unexpected inference output 'OUTPUT7'" in message
    assert "OUTPUT0" in message and "OUTPUT1" in message


def test_output_requested_twice_is_rejected() -> None:
    message = rejected(SIMPLE, request(*simple_inputs(), outputs=("OUTPUT0", "OUTPUT0")))
    assert "more than once" in message


# --- raw binary request (Inference-Header-Content-Length: 0) -----------------------------------


def raw(body: bytes) -> ParsedRequest:
    parsed = parse_infer_request(body, "0")
    assert parsed.raw_body == body
    return parsed


def test_raw_binary_request_is_the_single_input_with_batch_1() -> None:
    image = np.arange(6, dtype=np.float32).reshape(3, 2)
    valid = validate(SINGLE, raw(image.tobytes()))
    assert len(valid.inputs) == 1
    [given] = valid.inputs
    assert (given.name, given.datatype, given.shape) == ("IMAGE", "FP32", [1, 3, 2])
    assert np.array_equal(tensors.to_numpy(given), image[None])
    assert valid.batch_size == 1


def test_raw_binary_request_returns_every_output_binary() -> None:
    valid = validate(SINGLE, raw(np.zeros((3, 2), np.float32).tobytes()))
    assert [(o.name, o.binary) for o in valid.outputs] == [("SCORES", True), ("LABEL", True)]


def test_raw_binary_request_without_batching_has_the_dims_as_shape() -> None:
    config = parse_pbtxt(
        """
        name: "fixed"
        platform: "onnxruntime_onnx"
        input [ { name: "X" data_type: TYPE_INT16 dims: [ 4 ] } ]
        output [ { name: "Y" data_type: TYPE_INT16 dims: [ 4 ] } ]
        """
    )
    valid = validate(config, raw(np.arange(4, dtype=np.int16).tobytes()))
    assert valid.inputs[0].shape == [4]


def test_raw_binary_request_of_the_wrong_size_names_the_input() -> None:
    message = rejected(SINGLE, raw(b"\x00" * 20))
    assert "'IMAGE'" in message
    assert "20 bytes" in message and "24" in message


def test_raw_binary_request_for_a_two_input_model_is_rejected() -> None:
    message = rejected(SIMPLE, raw(b"\x00" * 64))
    assert "exactly one input" in message
    assert "'simple'" in message


def test_raw_binary_request_for_a_variable_shape_input_is_rejected() -> None:
    config = parse_pbtxt(
        """
        name: "var1"
        platform: "onnxruntime_onnx"
        max_batch_size: 2
        input [ { name: "T" data_type: TYPE_INT64 dims: [ -1 ] } ]
        output [ { name: "O" data_type: TYPE_INT64 dims: [ -1 ] } ]
        """
    )
    message = rejected(config, raw(b"\x00" * 8))
    assert "'T'" in message and "fixed dims" in message


# --- the checks remembered per config (gateway.core.validation._checked_inputs)
# ---------------------


def test_remembered_checks_answer_as_the_first_and_refuse_what_differs() -> None:
    """A model's second request of the same names, datatypes and shapes takes the remembered
    answer (the same tensors, in the config's order); any difference is checked afresh."""
    a, b = simple_inputs(batch=2)
    first = validate(SIMPLE, request(b, a))
    again_b, again_a = (
        tensor("INPUT1", np.ones((2, 16), np.int32)),
        tensor("INPUT0", np.zeros((2, 16), np.int32)),
    )
    second = validate(SIMPLE, request(again_b, again_a))
    assert [t.name for t in first.inputs] == [t.name for t in second.inputs] == ["INPUT0", "INPUT1"]
    assert second.inputs[0] is again_a and second.inputs[1] is again_b
    assert (second.batch_size, second.shape_sig) == (first.batch_size, first.shape_sig)
    wide = tensor("INPUT0", np.zeros((2, 17), np.int32))
    assert "unexpected shape for input 'INPUT0'" in rejected(SIMPLE, request(wide, again_b))
    floats = tensor("INPUT0", np.zeros((2, 16), np.float32))
    assert "data-type is 'FP32'" in rejected(SIMPLE, request(floats, again_b))
    assert "batch-size must be <= 8" in rejected(
        SIMPLE, request(*simple_inputs(batch=9))
    )  # fmt: skip
    for _ in range(2):  # a refusal is not remembered: it is refused every time
        assert "missing required input(s) ['INPUT1']" in rejected(SIMPLE, request(a))


def test_a_changed_config_is_checked_afresh() -> None:
    a, b = simple_inputs()
    assert validate(SIMPLE, request(a, b)).batch_size == 1
    narrower = parse_pbtxt(SIMPLE_PBTXT.replace("dims: [ 16 ]", "dims: [ 8 ]"))
    assert "Expected [-1,8], got [1,16]" in rejected(narrower, request(a, b))
