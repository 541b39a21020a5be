"""KServe v2 over gRPC with tritonclient.grpc: the same data plane, validation and errors."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aiogrpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from conch.ports import free_port
from conch.private_redis import PrivateRedis
from tests.mesh import Mesh, flush_database

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def grpc_mesh(
    redis_server: PrivateRedis, model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Mesh, str]]:
    flush_database(redis_server.url)
    mesh = Mesh(redis_server.url, model_repository, log_dir=tmp_path_factory.mktemp("grpc_logs"))
    port = free_port()
    try:
        mesh.start_scheduler()
        mesh.start_worker()
        mesh.start_gateway(CONCH_GATEWAY_GRPC_PORT=str(port))
        mesh.wait_ready(["simple", "mlp"])
        yield mesh, f"127.0.0.1:{port}"
    finally:
        mesh.stop()


def simple_inputs(a: np.ndarray, b: np.ndarray) -> list[grpcclient.InferInput]:
    inputs = []
    for name, value in (("INPUT0", a), ("INPUT1", b)):
        tensor = grpcclient.InferInput(name, list(value.shape), "INT32")
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)
    return inputs


def test_health_metadata_config_and_infer(grpc_mesh: tuple[Mesh, str]) -> None:
    _, url = grpc_mesh
    client = grpcclient.InferenceServerClient(url)
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("simple") and not client.is_model_ready("nope")
    assert "binary_tensor_data" in client.get_server_metadata(as_json=True)["extensions"]
    meta = client.get_model_metadata("simple", as_json=True)
    assert meta["inputs"][0] == {"name": "INPUT0", "datatype": "INT32", "shape": ["-1", "16"]}
    config = client.get_model_config("simple", as_json=True)["config"]
    assert config["max_batch_size"] == 8
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.full((2, 16), 5, dtype=np.int32)
    result = client.infer("simple", simple_inputs(a, b), request_id="g-1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert result.get_response().id == "g-1"
    stats = client.get_inference_statistics("simple", as_json=True)["model_stats"][0]
    assert int(stats["inference_count"]) >= 2


def test_typed_contents_are_accepted(grpc_mesh: tuple[Mesh, str]) -> None:
    """Clients that send typed contents (not raw bytes) get the same answers."""
    _, url = grpc_mesh
    request = service_pb2.ModelInferRequest(model_name="simple")
    for name, values in (("INPUT0", list(range(16))), ("INPUT1", [1] * 16)):
        tensor = request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        tensor.contents.int_contents.extend(values)
    with grpc.insecure_channel(url) as channel:
        response = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    by_name = {o.name: i for i, o in enumerate(response.outputs)}
    total = np.frombuffer(response.raw_output_contents[by_name["OUTPUT0"]], dtype="<i4")
    np.testing.assert_array_equal(total, np.arange(16) + 1)


@pytest.mark.parametrize(
    ("model", "shape", "status", "word"),
    [
        ("nope", [1, 16], "StatusCode.NOT_FOUND", "nope"),
        ("simple", [1, 8], "StatusCode.INVALID_ARGUMENT", "INPUT0"),
        ("simple", [9, 16], "StatusCode.INVALID_ARGUMENT", "batch-size"),
    ],
)
def test_bad_requests_get_grpc_status_codes(
    grpc_mesh: tuple[Mesh, str], model: str, shape: list[int], status: str, word: str
) -> None:
    _, url = grpc_mesh
    client = grpcclient.InferenceServerClient(url)
    value = np.ones(shape, dtype=np.int32)
    with pytest.raises(InferenceServerException) as info:
        client.infer(model, simple_inputs(value, value))
    assert info.value.status() == status
    assert word in info.value.message()


async def test_concurrent_aio_requests(grpc_mesh: tuple[Mesh, str]) -> None:
    _, url = grpc_mesh
    client = aiogrpcclient.InferenceServerClient(url)
    try:
        x = np.random.default_rng(2).standard_normal((32, 1, 256)).astype(np.float32)

        async def one(i: int) -> np.ndarray:
            tensor = aiogrpcclient.InferInput("INPUT0", [1, 256], "FP32")
            tensor.set_data_from_numpy(x[i])
            return (await client.infer("mlp", [tensor])).as_numpy("OUTPUT0")

        results = await asyncio.gather(*(one(i) for i in range(32)))
    finally:
        await client.close()
    import onnxruntime as ort

    session = ort.InferenceSession(str(grpc_mesh[0].repository / "mlp" / "1" / "model.onnx"))
    expected = session.run(["OUTPUT0"], {"INPUT0": x.reshape(32, 256)})[0]
    np.testing.assert_allclose(np.concatenate(results), expected, rtol=1e-5, atol=1e-5)
