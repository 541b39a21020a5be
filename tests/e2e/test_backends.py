"""One repository, every backend: ONNX, TorchScript, torch.export and Python models, served by
one worker service per backend and called with tritonclient."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient
from tritonclient.utils import InferenceServerException

from conch.private_redis import PrivateRedis
from tests.conftest import ROOT
from tests.mesh import Mesh, flush_database

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.e2e

MODELS = ["simple", "torchscript_mlp", "export_mlp", "tokenizer", "python_probe"]


@pytest.fixture(scope="module")
def backend_mesh(
    redis_server: PrivateRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Mesh]:
    repo = tmp_path_factory.mktemp("all_backends")
    for script in ("make_models.py", "make_backend_models.py"):
        subprocess.run(
            [sys.executable, str(ROOT / "examples" / script), str(repo)],
            check=True,
            capture_output=True,
        )
    flush_database(redis_server.url)
    mesh = Mesh(redis_server.url, repo, log_dir=tmp_path_factory.mktemp("logs"))
    try:
        mesh.start_scheduler()
        for backend in ("onnxruntime", "pytorch", "python"):
            mesh.start_worker(f"worker-{backend}", backend=backend)
        mesh.start_gateway()
        mesh.wait_ready(MODELS, timeout_s=120)
        yield mesh
    finally:
        mesh.stop()


def test_every_backend_is_ready(backend_mesh: Mesh) -> None:
    client = httpclient.InferenceServerClient(backend_mesh.url)
    for model in MODELS:
        assert client.is_model_ready(model), model
    assert client.get_model_metadata("torchscript_mlp")["platform"] == "pytorch_libtorch"
    assert client.get_model_metadata("tokenizer")["platform"] == "python"


def test_torchscript_matches_torch(backend_mesh: Mesh) -> None:
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    module = torch.jit.load(str(backend_mesh.repository / "torchscript_mlp" / "1" / "model.pt"))
    with torch.inference_mode():
        expected = [t.numpy() for t in module(torch.from_numpy(x))]
    client = httpclient.InferenceServerClient(backend_mesh.url)
    tensor = httpclient.InferInput("INPUT__0", [3, 4], "FP32")
    tensor.set_data_from_numpy(x)
    result = client.infer("torchscript_mlp", [tensor])
    np.testing.assert_allclose(result.as_numpy("OUTPUT__0"), expected[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(result.as_numpy("OUTPUT__1"), expected[1], rtol=1e-5, atol=1e-6)


def test_torch_export_matches_torch(backend_mesh: Mesh) -> None:
    rng = np.random.default_rng(1)
    features = rng.standard_normal((2, 4)).astype(np.float32)
    scale = rng.uniform(0.5, 2, (2, 1)).astype(np.float32)
    program = torch.export.load(str(backend_mesh.repository / "export_mlp" / "1" / "model.pt2"))
    with torch.inference_mode():
        scores, norm = program.module()(torch.from_numpy(features), torch.from_numpy(scale))
    client = httpclient.InferenceServerClient(backend_mesh.url)
    inputs = [
        httpclient.InferInput("scale", [2, 1], "FP32"),
        httpclient.InferInput("features", [2, 4], "FP32"),
    ]
    inputs[0].set_data_from_numpy(scale)
    inputs[1].set_data_from_numpy(features, binary_data=True)
    result = client.infer("export_mlp", inputs)
    np.testing.assert_allclose(result.as_numpy("scores"), scores.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(result.as_numpy("norm"), norm.numpy(), rtol=1e-5, atol=1e-6)


def _tokenizer_module(repo: Path):
    """The model's own file, imported with a stand-in for pb_utils, to compute expectations."""
    sys.path.insert(0, str(ROOT / "workers" / "python"))
    try:
        spec = importlib.util.spec_from_file_location(
            "tokenizer_model", repo / "tokenizer" / "1" / "model.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    return module


def test_triton_python_model_runs_unchanged_bytes_in_and_out(backend_mesh: Mesh) -> None:
    texts = [b"Hello, Conch!", "naïve café".encode()]
    client = httpclient.InferenceServerClient(backend_mesh.url)
    tensor = httpclient.InferInput("TEXT", [2, 1], "BYTES")
    tensor.set_data_from_numpy(np.array(texts, dtype=object).reshape(2, 1))
    result = client.infer("tokenizer", [tensor])
    module = _tokenizer_module(backend_mesh.repository)
    for row, text in enumerate(texts):
        ids, words = module.tokenize(text.decode(), 16)
        np.testing.assert_array_equal(result.as_numpy("TOKEN_IDS")[row], ids)
        assert result.as_numpy("NORMALIZED")[row][0] == words.encode()


def _probe(value: int, **parameters: str) -> tuple[list[httpclient.InferInput], dict]:
    tensor = httpclient.InferInput("INPUT0", [1, 1], "INT64")
    tensor.set_data_from_numpy(np.array([[value]], dtype=np.int64))
    return [tensor], parameters


async def test_an_exception_in_execute_fails_only_that_request(backend_mesh: Mesh) -> None:
    client = aiohttpclient.InferenceServerClient(backend_mesh.url)

    async def call(value: int):
        tensor = aiohttpclient.InferInput("INPUT0", [1, 1], "INT64")
        tensor.set_data_from_numpy(np.array([[value]], dtype=np.int64))
        return await client.infer("python_probe", [tensor])

    try:
        results = await asyncio.gather(*(call(v) for v in [3, -1, 5, 7]), return_exceptions=True)
    finally:
        await client.close()
    assert isinstance(results[1], InferenceServerException)
    assert "-1" in str(results[1])
    for value, result in zip([3, 5, 7], [results[0], results[2], results[3]], strict=True):
        assert not isinstance(result, Exception), result
        assert result.as_numpy("OUTPUT0")[0][0] == 2 * value


def test_a_crashing_model_process_is_restarted(backend_mesh: Mesh) -> None:
    client = httpclient.InferenceServerClient(backend_mesh.url)
    inputs, _ = _probe(-9)
    with pytest.raises(InferenceServerException) as info:
        client.infer("python_probe", inputs)
    assert info.value.status() == "503"
    # The mesh keeps serving: the instance was restarted with a new process.
    inputs, _ = _probe(21)
    for _ in range(4):
        assert client.infer("python_probe", inputs).as_numpy("OUTPUT0")[0][0] == 42


def _clear(directory: str) -> None:
    for path in Path(directory).iterdir():
        path.unlink()


async def test_two_instances_execute_two_batches_at_once(backend_mesh: Mesh) -> None:
    # Each execution waits inside execute until another one is there too: only two instances
    # running at the same time let both requests finish with a positive PID.
    client = aiohttpclient.InferenceServerClient(backend_mesh.url)
    with tempfile.TemporaryDirectory() as meeting:

        async def call(value: int, timeout_s: float = 20.0):
            tensor = aiohttpclient.InferInput("INPUT0", [1, 1], "INT64")
            tensor.set_data_from_numpy(np.array([[value]], dtype=np.int64))
            parameters = {"rendezvous": meeting, "parties": 2, "rendezvous_timeout_s": timeout_s}
            return await client.infer("python_probe", [tensor], parameters=parameters)

        try:
            first = await call(1, timeout_s=1.0)  # alone: cannot meet anyone, answers with -pid
            assert first.as_numpy("PID")[0][0] < 0
            _clear(meeting)
            # Sent apart, so the dynamic batcher cannot put both into one execution: the first
            # waits inside execute on one instance while the second runs on the other.
            first_call = asyncio.ensure_future(call(2))
            await asyncio.sleep(0.3)
            results = [await call(3), await first_call]
        finally:
            await client.close()
    pids = [int(r.as_numpy("PID")[0][0]) for r in results]
    assert all(pid > 0 for pid in pids), pids
    assert pids[0] != pids[1]
