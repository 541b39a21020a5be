"""FIL models in a mesh: the example tree models answer tritonclient HTTP and gRPC with what
XGBoost, LightGBM and scikit-learn predict themselves, batched and unbatched."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

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

xgboost = pytest.importorskip("xgboost")
lightgbm = pytest.importorskip("lightgbm")
pytest.importorskip("sklearn")
pytest.importorskip("treelite")
pytestmark = pytest.mark.e2e

ADMIN = "fil-admin-token"
SCRIPT = ROOT / "examples" / "make_fil_models.py"
MODELS = [
    "fil_xgboost",
    "fil_xgboost_json",
    "fil_lightgbm",
    "fil_sklearn",
    "fil_unbatched",
    "fil_auto",
]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_fil_models", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _variants(repo: Path) -> None:
    """An unbatched LightGBM model and an auto-completed scikit-learn forest."""
    shutil.copytree(repo / "fil_lightgbm" / "1", repo / "fil_unbatched" / "1")
    (repo / "fil_unbatched" / "config.pbtxt").write_text(
        (repo / "fil_lightgbm" / "config.pbtxt")
        .read_text()
        .replace("max_batch_size: 4096", "max_batch_size: 0")
        .replace("dims: [ 16 ]", "dims: [ -1, 16 ]")
        .replace("dims: [ 1 ]", "dims: [ -1, 1 ]")
        .replace("dynamic_batching { max_queue_delay_microseconds: 500 }", "")
    )
    shutil.copytree(repo / "fil_sklearn" / "1", repo / "fil_auto" / "1")
    (repo / "fil_auto" / "config.pbtxt").write_text(
        'backend: "fil"\nmax_batch_size: 64\nparameters [\n'
        '  { key: "model_type", value: { string_value: "treelite_checkpoint" } },\n'
        '  { key: "output_class", value: { string_value: "true" } },\n'
        '  { key: "storage_type", value: { string_value: "SPARSE" } }\n]\n'
    )


@dataclass
class FilMesh:
    mesh: Mesh
    grpc_url: str
    script: ModuleType

    @property
    def repo(self) -> Path:
        return self.mesh.repository


@pytest.fixture(scope="module")
def fil_mesh(
    redis_server: PrivateRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FilMesh]:
    repo = tmp_path_factory.mktemp("fil_repo")
    subprocess.run([sys.executable, str(SCRIPT), str(repo)], check=True, capture_output=True)
    _variants(repo)
    flush_database(redis_server.url)
    mesh = Mesh(redis_server.url, repo, log_dir=tmp_path_factory.mktemp("fil_logs"))
    port = free_port()
    try:
        mesh.start_scheduler()
        mesh.start_worker("worker-fil", backend="fil")
        mesh.start_gateway(
            processes=1, CONCH_GATEWAY_GRPC_PORT=str(port), CONCH_GATEWAY_ADMIN_TOKEN=ADMIN
        )
        mesh.wait_ready(MODELS, timeout_s=120)
        yield FilMesh(mesh, f"127.0.0.1:{port}", _script())
    finally:
        mesh.stop()


def _rows(n: int, seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 16)).astype(np.float32)


def _expected(fil: FilMesh, model: str, x: np.ndarray) -> np.ndarray:
    """The library's own answer for the model's file."""
    version = fil.repo / model / "1"
    if model == "fil_xgboost":
        classifier = xgboost.XGBClassifier()
        classifier.load_model(version / "xgboost.ubj")
        return classifier.predict_proba(x)
    if model == "fil_xgboost_json":
        classifier = xgboost.XGBClassifier()
        classifier.load_model(version / "xgboost.json")
        return classifier.predict(x).reshape(-1, 1)
    if model in ("fil_lightgbm", "fil_unbatched"):
        return lightgbm.Booster(model_file=str(version / "model.txt")).predict(x).reshape(-1, 1)
    forest = fil.script.sklearn_forest()
    if model == "fil_sklearn":
        return forest.predict_proba(x)
    return forest.predict(x).reshape(-1, 1)  # fil_auto: class ids


def _http(fil: FilMesh, model: str, x: np.ndarray) -> np.ndarray:
    client = httpclient.InferenceServerClient(fil.mesh.url)
    tensor = httpclient.InferInput("input__0", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=True)
    return client.infer(model, [tensor]).as_numpy("output__0")


def _grpc(fil: FilMesh, model: str, x: np.ndarray) -> np.ndarray:
    client = grpcclient.InferenceServerClient(fil.grpc_url)
    tensor = grpcclient.InferInput("input__0", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return client.infer(model, [tensor]).as_numpy("output__0")


@pytest.mark.parametrize("model", MODELS[:4])
def test_http_and_grpc_answer_what_the_library_predicts(fil_mesh: FilMesh, model: str) -> None:
    x = _rows(7)
    expected = _expected(fil_mesh, model, x)
    for call in (_http, _grpc):
        answer = call(fil_mesh, model, x)
        assert answer.dtype == np.float32 and answer.shape == expected.shape, call.__name__
        np.testing.assert_allclose(answer, expected, rtol=1e-6, atol=1e-6)


def test_binary_predict_proba_has_both_columns(fil_mesh: FilMesh) -> None:
    answer = _http(fil_mesh, "fil_xgboost", _rows(4))
    assert answer.shape == (4, 2)
    np.testing.assert_allclose(answer.sum(axis=1), 1.0, rtol=1e-6)


def _batch_sizes(fil: FilMesh, model: str) -> set[int]:
    stats = httpx.get(f"http://{fil.mesh.url}/v2/models/{model}/stats", timeout=5).json()
    return {int(b["batch_size"]) for b in stats["model_stats"][0]["batch_stats"]}


async def _concurrently(url: str, model: str, rows: np.ndarray) -> list[np.ndarray]:
    client = aiohttpclient.InferenceServerClient(url)
    try:

        async def one(row: np.ndarray) -> np.ndarray:
            tensor = aiohttpclient.InferInput("input__0", [1, 16], "FP32")
            tensor.set_data_from_numpy(row.reshape(1, 16))
            result = await client.infer(model, [tensor])
            return result.as_numpy("output__0")

        return await asyncio.gather(*(one(row) for row in rows))
    finally:
        await client.close()


def test_concurrent_requests_are_batched_and_each_gets_its_rows(fil_mesh: FilMesh) -> None:
    x = _rows(48, seed=11)
    expected = _expected(fil_mesh, "fil_xgboost", x)
    for _ in range(5):
        answers = asyncio.run(_concurrently(fil_mesh.mesh.url, "fil_xgboost", x))
        for row, answer in enumerate(answers):
            np.testing.assert_allclose(answer[0], expected[row], rtol=1e-6, atol=1e-6)
        if max(_batch_sizes(fil_mesh, "fil_xgboost")) > 1:
            return
    pytest.fail(f"no batch > 1 formed: {_batch_sizes(fil_mesh, 'fil_xgboost')}")


def test_an_unbatched_model_takes_any_number_of_rows(fil_mesh: FilMesh) -> None:
    config = httpclient.InferenceServerClient(fil_mesh.mesh.url).get_model_config("fil_unbatched")
    assert config["max_batch_size"] == 0
    for n in (1, 5):
        x = _rows(n, seed=n)
        expected = _expected(fil_mesh, "fil_unbatched", x)
        np.testing.assert_allclose(_http(fil_mesh, "fil_unbatched", x), expected, rtol=1e-6)
        np.testing.assert_allclose(_grpc(fil_mesh, "fil_unbatched", x), expected, rtol=1e-6)


def test_auto_complete_fills_the_tensors_from_the_model(fil_mesh: FilMesh) -> None:
    metadata = httpclient.InferenceServerClient(fil_mesh.mesh.url).get_model_metadata("fil_auto")
    assert metadata["inputs"] == [{"name": "input__0", "datatype": "FP32", "shape": [-1, 16]}]
    assert metadata["outputs"] == [{"name": "output__0", "datatype": "FP32", "shape": [-1, 1]}]
    x = _rows(6)
    np.testing.assert_array_equal(
        _grpc(fil_mesh, "fil_auto", x), _expected(fil_mesh, "fil_auto", x)
    )


def test_a_wrong_feature_count_is_refused(fil_mesh: FilMesh) -> None:
    x = np.zeros((2, 15), dtype=np.float32)
    with pytest.raises(InferenceServerException) as caught:
        _http(fil_mesh, "fil_xgboost", x)
    assert caught.value.status() == "400"
    assert "input__0" in str(caught.value)
    with pytest.raises(InferenceServerException) as unbatched:
        _grpc(fil_mesh, "fil_unbatched", x)
    assert "input__0" in str(unbatched.value)


def _load_with(fil: FilMesh, model: str, parameters: dict[str, str]) -> str:
    client = httpclient.InferenceServerClient(fil.mesh.url)
    config: dict[str, Any] = client.get_model_config(model)
    config["parameters"] = {k: {"string_value": v} for k, v in parameters.items()}
    with pytest.raises(InferenceServerException) as caught:
        client.load_model(
            model, config=json.dumps(config), headers={"Authorization": f"Bearer {ADMIN}"}
        )
    return str(caught.value)


def test_a_bad_configuration_fails_the_load_naming_the_parameter(fil_mesh: FilMesh) -> None:
    message = _load_with(fil_mesh, "fil_lightgbm", {"model_type": "sklearn"})
    assert "not recognized as a valid serialization format" in message
    message = _load_with(fil_mesh, "fil_lightgbm", {"model_type": "lightgbm", "threshold": "x"})
    assert "'threshold' is 'x'" in message
