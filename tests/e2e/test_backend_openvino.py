"""The OpenVINO backend in a mesh: the example IR (``openvino_mlp``, dynamically batched) and the
example ONNX file served by OpenVINO (``openvino_onnx``, unbatched, auto-completed) answer
tritonclient HTTP and gRPC exactly as OpenVINO's own compiled model does; concurrent requests
run as batches; wrong inputs and a wrong configuration get clear errors."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient
from tritonclient.utils import InferenceServerException

from conch.ports import free_port
from conch.private_redis import PrivateRedis
from tests.conftest import ROOT
from tests.mesh import Mesh, flush_database

ov = pytest.importorskip("openvino")
pytestmark = pytest.mark.e2e

MODELS = ["openvino_mlp", "openvino_onnx"]
# A model whose parameters ask for a device this worker does not serve: it must not load.
BAD_CONFIG = """\
name: "openvino_gpu"
backend: "openvino"
max_batch_size: 8
parameters { key: "TARGET_DEVICE" value: { string_value: "GPU" } }
"""


@dataclass
class OpenVinoMesh:
    mesh: Mesh
    grpc_port: int

    @property
    def repository(self) -> Path:
        return self.mesh.repository


@pytest.fixture(scope="module")
def ov_mesh(
    redis_server: PrivateRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OpenVinoMesh]:
    repo = tmp_path_factory.mktemp("openvino_models")
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "make_openvino_models.py"), str(repo)],
        check=True,
        capture_output=True,
    )
    bad = repo / "openvino_gpu"
    (bad / "1").mkdir(parents=True)
    (bad / "1" / "model.xml").write_bytes((repo / "openvino_mlp" / "1" / "model.xml").read_bytes())
    (bad / "1" / "model.bin").write_bytes((repo / "openvino_mlp" / "1" / "model.bin").read_bytes())
    (bad / "config.pbtxt").write_text(BAD_CONFIG, encoding="utf-8")
    flush_database(redis_server.url)
    mesh = Mesh(redis_server.url, repo, log_dir=tmp_path_factory.mktemp("openvino_logs"))
    grpc_port = free_port()
    try:
        mesh.start_scheduler()
        mesh.start_worker("worker-openvino", backend="openvino")
        mesh.start_gateway(processes=1, CONCH_GATEWAY_GRPC_PORT=str(grpc_port))
        mesh.wait_ready(MODELS, timeout_s=120)
        yield OpenVinoMesh(mesh, grpc_port)
    finally:
        mesh.stop()


def _reference(model_file: Path, x: np.ndarray) -> np.ndarray:
    """OpenVINO's own call: the model file compiled on CPU at f32, the backend's precision."""
    compiled = ov.Core().compile_model(str(model_file), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return np.asarray(compiled.create_infer_request().infer({0: x})[0])


def _rows(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 256)).astype(np.float32)


def test_both_models_are_ready_and_the_onnx_config_is_completed(ov_mesh: OpenVinoMesh) -> None:
    client = httpclient.InferenceServerClient(ov_mesh.mesh.url)
    for model in MODELS:
        assert client.is_model_ready(model), model
    config = client.get_model_config("openvino_onnx")
    assert config["backend"] == "openvino"
    assert config["input"][0]["name"] == "INPUT0"
    assert [int(d) for d in config["input"][0]["dims"]] == [-1, 256]
    assert config["output"][0]["name"] == "OUTPUT0"


def test_the_ir_answers_http_and_grpc_as_openvino_does(ov_mesh: OpenVinoMesh) -> None:
    x = _rows(3, 1)
    expected = _reference(ov_mesh.repository / "openvino_mlp" / "1" / "model.xml", x)
    http = httpclient.InferenceServerClient(ov_mesh.mesh.url)
    tensor = httpclient.InferInput("INPUT0", [3, 256], "FP32")
    tensor.set_data_from_numpy(x)
    answer = http.infer("openvino_mlp", [tensor]).as_numpy("OUTPUT0")
    np.testing.assert_allclose(answer, expected, rtol=1e-5, atol=1e-5)
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{ov_mesh.grpc_port}")
    gtensor = grpcclient.InferInput("INPUT0", [3, 256], "FP32")
    gtensor.set_data_from_numpy(x)
    ganswer = grpc.infer("openvino_mlp", [gtensor]).as_numpy("OUTPUT0")
    np.testing.assert_allclose(ganswer, expected, rtol=1e-5, atol=1e-5)


def test_concurrent_requests_run_as_batches(ov_mesh: OpenVinoMesh) -> None:
    x = _rows(48, 2)
    expected = _reference(ov_mesh.repository / "openvino_mlp" / "1" / "model.xml", x)

    async def call_all() -> list[np.ndarray]:
        client = aiohttpclient.InferenceServerClient(ov_mesh.mesh.url)

        async def call(row: int) -> np.ndarray:
            tensor = aiohttpclient.InferInput("INPUT0", [1, 256], "FP32")
            tensor.set_data_from_numpy(x[row : row + 1])
            result = await client.infer("openvino_mlp", [tensor])
            return np.asarray(result.as_numpy("OUTPUT0"))

        try:
            return await asyncio.gather(*(call(row) for row in range(len(x))))
        finally:
            await client.close()

    answers = asyncio.run(call_all())
    np.testing.assert_allclose(np.concatenate(answers), expected, rtol=1e-5, atol=1e-5)
    stats = httpx.get(f"http://{ov_mesh.mesh.url}/v2/models/openvino_mlp/stats", timeout=5).json()
    sizes = {int(b["batch_size"]) for b in stats["model_stats"][0]["batch_stats"]}
    assert max(sizes) > 1, sizes


def test_the_onnx_file_answers_unbatched_as_openvino_does(ov_mesh: OpenVinoMesh) -> None:
    x = _rows(5, 3)
    expected = _reference(ov_mesh.repository / "openvino_onnx" / "1" / "model.onnx", x)
    http = httpclient.InferenceServerClient(ov_mesh.mesh.url)
    tensor = httpclient.InferInput("INPUT0", [5, 256], "FP32")
    tensor.set_data_from_numpy(x)
    answer = http.infer("openvino_onnx", [tensor]).as_numpy("OUTPUT0")
    np.testing.assert_allclose(answer, expected, rtol=1e-5, atol=1e-5)
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{ov_mesh.grpc_port}")
    gtensor = grpcclient.InferInput("INPUT0", [5, 256], "FP32")
    gtensor.set_data_from_numpy(x)
    ganswer = grpc.infer("openvino_onnx", [gtensor]).as_numpy("OUTPUT0")
    np.testing.assert_allclose(ganswer, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("shape", "datatype", "words"),
    [
        ([1, 255], "FP32", "INPUT0"),
        ([1, 256], "FP64", "FP64"),
        ([1, 256], "BYTES", "BYTES"),
    ],
)
def test_a_bad_input_gets_a_clear_error(
    ov_mesh: OpenVinoMesh, shape: list[int], datatype: str, words: str
) -> None:
    client = httpclient.InferenceServerClient(ov_mesh.mesh.url)
    tensor = httpclient.InferInput("INPUT0", shape, datatype)
    if datatype == "BYTES":
        tensor.set_data_from_numpy(np.full(shape, b"x", dtype=object))
    else:
        tensor.set_data_from_numpy(
            np.zeros(shape, np.float64 if datatype == "FP64" else np.float32)
        )
    with pytest.raises(InferenceServerException) as info:
        client.infer("openvino_mlp", [tensor])
    assert words in str(info.value)
    assert client.is_model_ready("openvino_mlp")  # the model keeps serving


def test_a_device_this_worker_does_not_serve_fails_to_load(ov_mesh: OpenVinoMesh) -> None:
    client = httpclient.InferenceServerClient(ov_mesh.mesh.url)
    assert not client.is_model_ready("openvino_gpu")
    log = ov_mesh.mesh.log("worker-openvino", chars=50000)
    assert "expected the parameter 'TARGET_DEVICE' to be CPU" in log, log[-3000:]
