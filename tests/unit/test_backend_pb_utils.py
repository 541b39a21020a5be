"""``triton_python_backend_utils``: the helpers Triton's Python models call, with Triton's results.

Pure functions and small classes, so they are tested in this process; importing the module by
its top-level name (as a model does) needs the backend's directory on ``sys.path``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "workers" / "python"))
import triton_python_backend_utils as pb_utils

sys.path.pop(0)

CONFIG = {
    "input": [{"name": "IN", "data_type": "TYPE_STRING", "dims": [1]}],
    "output": [{"name": "OUT", "data_type": "TYPE_INT64", "dims": [4]}],
}


def test_config_lookups_and_type_tables() -> None:
    assert pb_utils.get_input_config_by_name(CONFIG, "IN") == CONFIG["input"][0]
    assert pb_utils.get_output_config_by_name(CONFIG, "OUT")["dims"] == [4]
    assert pb_utils.get_input_config_by_name(CONFIG, "missing") is None
    assert pb_utils.triton_string_to_numpy("TYPE_FP32") is np.float32
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb_utils.triton_string_to_numpy("TYPE_BOOL") is np.bool_
    assert pb_utils.numpy_to_triton_type(np.int64) == pb_utils.TRITONSERVER_TYPE_INT64
    assert pb_utils.numpy_to_triton_type(np.object_) == pb_utils.TRITONSERVER_TYPE_BYTES
    assert pb_utils.triton_to_numpy_type(pb_utils.TRITONSERVER_TYPE_FP16) is np.float16
    assert not pb_utils.using_decoupled_model_transaction_policy(CONFIG)


def test_byte_tensor_serialization_round_trip() -> None:
    array = np.array([b"ab", b"", "é".encode()], dtype=np.object_)
    encoded = pb_utils.serialize_byte_tensor(array)
    raw = encoded.item()
    assert raw == b"\x02\x00\x00\x00ab\x00\x00\x00\x00\x02\x00\x00\x00\xc3\xa9"
    np.testing.assert_array_equal(pb_utils.deserialize_bytes_tensor(raw), array)
    assert pb_utils.serialize_byte_tensor(np.array([], dtype=object)) == ()
    with pytest.raises(pb_utils.TritonModelException):
        pb_utils.serialize_byte_tensor(np.zeros(2, dtype=np.float32))


def test_request_response_and_error_objects() -> None:
    tensor = pb_utils.Tensor("IN", np.array([[b"x"]], dtype=object))
    request = pb_utils.InferenceRequest(
        "m", ["OUT"], [tensor], request_id="r1", parameters={"k": 1}
    )
    assert pb_utils.get_input_tensor_by_name(request, "IN") is tensor
    assert request.requested_output_names() == ["OUT"]
    assert json.loads(request.parameters()) == {"k": 1} and request.request_id() == "r1"
    assert tensor.name() == "IN" and tensor.shape() == [1, 1] and tensor.is_cpu()
    assert tensor.triton_dtype() == pb_utils.TRITONSERVER_TYPE_BYTES
    error = pb_utils.TritonError("bad", pb_utils.TritonError.INVALID_ARG)
    response = pb_utils.InferenceResponse(output_tensors=[], error=error)
    assert response.has_error() and response.error().message() == "bad"
    assert pb_utils.TritonError.CODE_NAMES[response.error().code()] == "INVALID_ARG"
    assert pb_utils.TritonError("x").code() == pb_utils.TritonError.INTERNAL
    ok = pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.arange(4))])
    assert pb_utils.get_output_tensor_by_name(ok, "OUT").as_numpy().tolist() == [0, 1, 2, 3]
    with pytest.raises(pb_utils.TritonModelException):
        pb_utils.Tensor("bad", [1, 2])


def test_dlpack_round_trip_and_logger(caplog: pytest.LogCaptureFixture) -> None:
    tensor = pb_utils.Tensor("A", np.arange(6, dtype=np.float32).reshape(2, 3))
    again = pb_utils.Tensor.from_dlpack("B", tensor)
    np.testing.assert_array_equal(again.as_numpy(), tensor.as_numpy())
    with caplog.at_level("INFO", logger="conch.python_model"):
        pb_utils.Logger.log_info("hello")
        pb_utils.Logger.log("warned", pb_utils.Logger.WARNING)
    assert [r.getMessage() for r in caplog.records] == ["hello", "warned"]


def test_response_sender_rules() -> None:
    """Triton's sender: closed by the final flag, None only with it; only decoupled requests
    have one."""
    sent: list[tuple[str, object, bool]] = []
    sender = pb_utils.InferenceResponseSender(
        "r", lambda rid, resp, final: sent.append((rid, resp, final)), lambda rid: rid == "r"
    )
    with pytest.raises(pb_utils.TritonModelException, match="cannot be None"):
        sender.send()
    response = pb_utils.InferenceResponse()
    sender.send(response)
    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert sent == [("r", response, False), ("r", None, True)]
    assert sender.is_closed() and sender.is_cancelled()
    with pytest.raises(pb_utils.TritonModelException, match="has been closed"):
        sender.send(response)
    with pytest.raises(pb_utils.TritonModelException, match="decoupled: true"):
        pb_utils.InferenceRequest().get_response_sender()
