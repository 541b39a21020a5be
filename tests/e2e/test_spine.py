"""The spine as a Triton user meets it: tritonclient against a mesh of real processes."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient
from tritonclient.utils import InferenceServerException

from tests.mesh import Mesh

pytestmark = pytest.mark.e2e


def simple_inputs(a: np.ndarray, b: np.ndarray, binary: bool) -> list[httpclient.InferInput]:
    inputs = []
    for name, value in (("INPUT0", a), ("INPUT1", b)):
        tensor = httpclient.InferInput(name, list(value.shape), "INT32")
        tensor.set_data_from_numpy(value, binary_data=binary)
        inputs.append(tensor)
    return inputs


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_simple_sum_and_difference(mesh: Mesh, binary: bool) -> None:
    client = httpclient.InferenceServerClient(mesh.url)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary),
    ]
    result = client.infer("simple", simple_inputs(a, b, binary), outputs=outputs, request_id="r-7")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    response = result.get_response()
    assert response["id"] == "r-7"
    assert response["model_name"] == "simple"
    assert response["model_version"] == "1"


def test_subset_of_outputs_and_batch(mesh: Mesh) -> None:
    client = httpclient.InferenceServerClient(mesh.url)
    a = np.arange(64, dtype=np.int32).reshape(4, 16)
    b = np.ones((4, 16), dtype=np.int32)
    result = client.infer(
        "simple",
        simple_inputs(a, b, True),
        outputs=[httpclient.InferRequestedOutput("OUTPUT1")],
        model_version="1",
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert result.as_numpy("OUTPUT0") is None


def test_server_and_model_metadata(mesh: Mesh) -> None:
    client = httpclient.InferenceServerClient(mesh.url)
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("simple") and client.is_model_ready("simple", "1")
    assert not client.is_model_ready("simple", "9")
    assert not client.is_model_ready("nope")
    server = client.get_server_metadata()
    assert "binary_tensor_data" in server["extensions"]
    meta = client.get_model_metadata("simple")
    assert meta["versions"] == ["1"]
    assert meta["platform"] == "onnxruntime_onnx"
    assert meta["inputs"] == [
        {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]},
        {"name": "INPUT1", "datatype": "INT32", "shape": [-1, 16]},
    ]
    config = client.get_model_config("simple")
    assert config["max_batch_size"] == 8
    assert config["input"][0]["data_type"] == "TYPE_INT32"
    assert config["input"][0]["dims"] == [16]
    assert "max_queue_delay_microseconds" in config["dynamic_batching"]


def test_mlp_matches_onnxruntime(mesh: Mesh) -> None:
    import onnxruntime as ort

    session = ort.InferenceSession(str(mesh.repository / "mlp" / "1" / "model.onnx"))
    x = np.random.default_rng(3).standard_normal((3, 256)).astype(np.float32)
    expected = session.run(["OUTPUT0"], {"INPUT0": x})[0]
    client = httpclient.InferenceServerClient(mesh.url)
    tensor = httpclient.InferInput("INPUT0", [3, 256], "FP32")
    tensor.set_data_from_numpy(x)
    got = client.infer("mlp", [tensor]).as_numpy("OUTPUT0")
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


async def test_64_concurrent_requests_are_batched(mesh: Mesh) -> None:
    client = aiohttpclient.InferenceServerClient(mesh.url, conn_limit=64)
    before = await client.get_inference_statistics("simple")
    try:
        rng = np.random.default_rng(1)
        pairs = [
            (
                rng.integers(-1000, 1000, (1, 16), dtype=np.int32),
                rng.integers(-1000, 1000, (1, 16), dtype=np.int32),
            )
            for _ in range(64)
        ]

        async def one(index: int) -> None:
            a, b = pairs[index]
            inputs = []
            for name, value in (("INPUT0", a), ("INPUT1", b)):
                tensor = aiohttpclient.InferInput(name, [1, 16], "INT32")
                tensor.set_data_from_numpy(value, binary_data=index % 2 == 0)
                inputs.append(tensor)
            result = await client.infer("simple", inputs, request_id=str(index))
            assert result.get_response()["id"] == str(index)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)

        await asyncio.gather(*(one(i) for i in range(64)))
        after = await client.get_inference_statistics("simple")
    finally:
        await client.close()
    stats_before = before["model_stats"][0]
    stats = after["model_stats"][0]
    inferences = int(stats["inference_count"]) - int(stats_before["inference_count"])
    executions = int(stats["execution_count"]) - int(stats_before["execution_count"])
    assert inferences == 64
    assert executions < 64, "requests were never executed together"
    assert max(int(b["batch_size"]) for b in stats["batch_stats"]) > 1


BAD_REQUESTS = [
    # (path suffix, body, headers, status, words the message must contain)
    ("nope/infer", b'{"inputs": []}', {}, 404, ["nope"]),
    ("simple/versions/7/infer", b'{"inputs": []}', {}, 404, ["simple", "7"]),
    ("simple/infer", b"{not json", {}, 400, ["JSON"]),
    ("simple/infer", b'{"inputs": [{"name": "INPUT0"}]}', {}, 400, ["shape"]),
    (
        "simple/infer",
        b'{"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", '
        b'"data": [' + b",".join([b"1"] * 16) + b"]}]}",
        {},
        400,
        ["INPUT1", "missing"],
    ),
    (
        "simple/infer",
        b'{"inputs": [{"name": "INPUTX", "shape": [1, 16], "datatype": "INT32", '
        b'"data": [' + b",".join([b"1"] * 16) + b"]}]}",
        {},
        400,
        ["INPUTX", "unexpected"],
    ),
    (
        "simple/infer",
        b'{"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", '
        b'"data": [' + b",".join([b"1.0"] * 16) + b']}, {"name": "INPUT1", "shape": '
        b'[1, 16], "datatype": "INT32", "data": [' + b",".join([b"1"] * 16) + b"]}]}",
        {},
        400,
        ["INPUT0", "FP32", "INT32"],
    ),
    (
        "simple/infer",
        b'{"inputs": [{"name": "INPUT0", "shape": [1, 8], "datatype": "INT32", '
        b'"data": [' + b",".join([b"1"] * 8) + b']}, {"name": "INPUT1", "shape": '
        b'[1, 8], "datatype": "INT32", "data": [' + b",".join([b"1"] * 8) + b"]}]}",
        {},
        400,
        ["INPUT0", "[-1,16]", "[1,8]"],
    ),
    (
        "simple/infer",
        b'{"inputs": [{"name": "INPUT0", "shape": [9, 16], "datatype": "INT32", '
        b'"data": [' + b",".join([b"1"] * 144) + b']}, {"name": "INPUT1", "shape": '
        b'[9, 16], "datatype": "INT32", "data": [' + b",".join([b"1"] * 144) + b"]}]}",
        {},
        400,
        ["batch-size", "8"],
    ),
    (
        "simple/infer",
        b'{"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", '
        b'"parameters": {"binary_data_size": 64}}, {"name": "INPUT1", "shape": [1, 16], '
        b'"datatype": "INT32", "parameters": {"binary_data_size": 64}}]}' + b"\0" * 100,
        {"Inference-Header-Content-Length": "CALC"},
        400,
        ["INPUT1", "64"],
    ),
    (
        "simple/infer",
        b'{"inputs": []}',
        {"Inference-Header-Content-Length": "abc"},
        400,
        ["Inference-Header-Content-Length"],
    ),
    (
        "simple/infer",
        b'{"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", '
        b'"data": [' + b",".join([b"1"] * 15) + b"]}]}",
        {},
        400,
        ["INPUT0", "16", "15"],
    ),
]


@pytest.mark.parametrize(
    ("path", "body", "headers", "status", "words"),
    BAD_REQUESTS,
    ids=[
        "unknown-model",
        "unknown-version",
        "malformed-json",
        "missing-fields",
        "missing-input",
        "unexpected-input",
        "wrong-datatype",
        "wrong-shape",
        "batch-too-large",
        "binary-size-mismatch",
        "bad-header-length",
        "element-count",
    ],
)
def test_bad_input_is_a_clear_4xx(
    mesh: Mesh, path: str, body: bytes, headers: dict[str, str], status: int, words: list[str]
) -> None:
    import httpx

    if headers.get("Inference-Header-Content-Length") == "CALC":
        headers = {"Inference-Header-Content-Length": str(body.index(b"\0"))}
    response = httpx.post(f"http://{mesh.url}/v2/models/{path}", content=body, headers=headers)
    assert response.status_code == status, response.text
    message = response.json()["error"]
    for word in words:
        assert word in message, message
    # The mesh keeps serving.
    ok = httpclient.InferenceServerClient(mesh.url).infer(
        "simple", simple_inputs(np.ones((1, 16), np.int32), np.ones((1, 16), np.int32), False)
    )
    np.testing.assert_array_equal(ok.as_numpy("OUTPUT0"), np.full((1, 16), 2))


def test_tritonclient_sees_the_error(mesh: Mesh) -> None:
    client = httpclient.InferenceServerClient(mesh.url)
    tensor = httpclient.InferInput("INPUT0", [1, 16], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 16), np.float32))
    with pytest.raises(InferenceServerException) as info:
        client.infer("simple", [tensor])
    assert "INPUT0" in str(info.value)
    assert info.value.status() == "400"
