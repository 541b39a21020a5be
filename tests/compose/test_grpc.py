"""KServe v2 gRPC through Envoy's published gRPC port (8081, as Triton's 8001 beside 8000), with
tritonclient.grpc: the README's example, a binary request, a sequence and a decoupled stream.

Envoy routes requests with content-type application/grpc to the gateways' gRPC ports over
HTTP/2 (controlplane/resources.py), on its gRPC listener and on its HTTP one alike.
"""

from __future__ import annotations

import queue
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.compose.conftest import HTTP, running_sums


def test_the_readme_example_answers_over_grpc_through_envoy(grpc_url: str) -> None:
    with grpcclient.InferenceServerClient(grpc_url) as client:
        assert client.is_server_live() and client.is_model_ready("simple")
        assert client.get_model_metadata("simple").platform == "onnxruntime_onnx"
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        b = np.ones((1, 16), dtype=np.int32)
        inputs = [
            grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
            grpcclient.InferInput("INPUT1", [1, 16], "INT32"),
        ]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = client.infer("simple", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
        stats = client.get_inference_statistics("simple", as_json=True)["model_stats"][0]
        assert int(stats["inference_count"]) >= 1


def test_grpc_also_goes_through_envoys_http_port(http_url: str) -> None:
    """One port for both protocols works too: Envoy tells gRPC by its content-type."""
    with grpcclient.InferenceServerClient(HTTP) as client:
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(a)
        result = client.infer("simple", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * a)


def test_a_binary_request_over_grpc(grpc_url: str) -> None:
    """Raw tensor bytes both ways (raw_input_contents / raw_output_contents), and a request
    large enough (64 x 256 FP32, 64 KiB) to span several HTTP/2 frames through Envoy."""
    rng = np.random.default_rng(2)
    x = rng.random((4, 16), dtype=np.float32)
    y = np.ones((4, 16), dtype=np.float32)
    with grpcclient.InferenceServerClient(grpc_url) as client:
        inputs = [
            grpcclient.InferInput("INPUT0", [4, 16], "FP32"),
            grpcclient.InferInput("INPUT1", [4, 16], "FP32"),
        ]
        inputs[0].set_data_from_numpy(x)
        inputs[1].set_data_from_numpy(y)
        outputs = [grpcclient.InferRequestedOutput(n) for n in ("OUTPUT0", "OUTPUT1")]
        result = client.infer("add_sub", inputs, outputs=outputs)
        np.testing.assert_allclose(result.as_numpy("OUTPUT0"), x + y, rtol=1e-6)
        np.testing.assert_allclose(result.as_numpy("OUTPUT1"), x - y, rtol=1e-6)
        assert len(result.get_response().raw_output_contents) == 2

        big = rng.random((64, 256), dtype=np.float32)
        tensor = grpcclient.InferInput("INPUT0", [64, 256], "FP32")
        tensor.set_data_from_numpy(big)
        out = client.infer("mlp", [tensor]).as_numpy("OUTPUT0")
        assert out.shape == (64, 16) and np.isfinite(out).all()


def test_a_sequence_keeps_its_state_over_grpc(grpc_url: str) -> None:
    values = [2, 4, 6, 8]
    with grpcclient.InferenceServerClient(grpc_url) as client:
        outs = running_sums(client, grpcclient, values, sequence_id=4343)
    # sequence_accumulator keeps its sum in implicit state: each answer is the running sum.
    assert outs == list(np.cumsum(values)), outs


def test_a_decoupled_model_streams_over_model_stream_infer(grpc_url: str) -> None:
    """square_int32 (Triton's decoupled example): IN = n gives n responses, each OUT = n, then
    (asked for) an empty final one; all on one bidirectional stream through Envoy."""
    answers: queue.Queue[Any] = queue.Queue()

    def take(count: int) -> list[Any]:
        return [answers.get(timeout=30) for _ in range(count)]

    with grpcclient.InferenceServerClient(grpc_url) as client:
        client.start_stream(callback=lambda result, error: answers.put(error or result))
        for n in (3, 2):
            tensor = grpcclient.InferInput("IN", [1], "INT32")
            tensor.set_data_from_numpy(np.array([n], dtype=np.int32))
            client.async_stream_infer(
                "square_int32", [tensor], request_id=f"n{n}", enable_empty_final_response=True
            )
        frames: dict[str, list[Any]] = {}
        for answer in take(3 + 1 + 2 + 1):
            assert not isinstance(answer, InferenceServerException), answer
            response = answer.get_response()
            final = response.parameters["triton_final_response"].bool_param
            out = answer.as_numpy("OUT")
            frames.setdefault(response.id, []).append(
                (None if out is None else out.tolist(), final)
            )
        client.stop_stream()
    assert frames["n3"] == [([3], False)] * 3 + [(None, True)], frames
    assert frames["n2"] == [([2], False)] * 2 + [(None, True)], frames
