"""TensorFlow SavedModels served by a tensorflow worker, called with tritonclient over HTTP and
gRPC; every answer is compared with TensorFlow's own call of the same SavedModel.

The repository is the project's own (``examples/make_tensorflow_models.py``): ``tf_mlp``
(batched, dynamic batching), ``tf_text`` (unbatched, BYTES, a non-default signature) and
``tf_auto`` (no config.pbtxt: auto-complete), plus ``tf_bad``, whose configuration names a
signature the SavedModel lacks. One mesh for the module keeps TensorFlow's start-up paid once.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

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

tf = pytest.importorskip("tensorflow")
pytestmark = pytest.mark.e2e

MODELS = ["tf_mlp", "tf_text", "tf_auto"]


@pytest.fixture(scope="module")
def tf_mesh(
    redis_server: PrivateRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Mesh, int]]:
    repo = tmp_path_factory.mktemp("tf_repo")
    script = ROOT / "examples" / "make_tensorflow_models.py"
    subprocess.run([sys.executable, str(script), str(repo)], check=True, capture_output=True)
    shutil.copytree(repo / "tf_mlp", repo / "tf_bad")
    config = (repo / "tf_mlp" / "config.pbtxt").read_text().replace('"tf_mlp"', '"tf_bad"')
    bad = 'parameters { key: "TF_SIGNATURE_DEF" value: { string_value: "scoring" } }\n'
    (repo / "tf_bad" / "config.pbtxt").write_text(config + bad)
    flush_database(redis_server.url)
    mesh = Mesh(redis_server.url, repo, log_dir=tmp_path_factory.mktemp("logs"))
    grpc_port = free_port()
    try:
        mesh.start_scheduler()
        mesh.start_worker("worker-tensorflow", backend="tensorflow")
        mesh.start_gateway(
            processes=1,
            CONCH_GATEWAY_GRPC_PORT=str(grpc_port),
            CONCH_GATEWAY_REPOSITORY_REQUIRES_ADMIN="false",
        )
        mesh.wait_ready(MODELS, timeout_s=120)
        yield mesh, grpc_port
    finally:
        mesh.stop()


@pytest.fixture(scope="module")
def reference(tf_mesh: tuple[Mesh, int]) -> dict[str, Any]:
    """TensorFlow's own signatures of the served SavedModels, loaded in this process."""
    repo = tf_mesh[0].repository
    return {
        name: tf.saved_model.load(str(repo / name / "1" / "model.savedmodel")).signatures
        for name in ("tf_mlp", "tf_text")
    }


def _features(rows: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, 8)).astype(np.float32)


def _expected_mlp(reference: dict[str, Any], x: np.ndarray) -> dict[str, np.ndarray]:
    out = reference["tf_mlp"]["serving_default"](features=tf.constant(x))
    return {name: value.numpy() for name, value in out.items()}


def test_the_models_are_ready_with_triton_platform_and_auto_complete(
    tf_mesh: tuple[Mesh, int],
) -> None:
    client = httpclient.InferenceServerClient(tf_mesh[0].url)
    assert client.get_model_metadata("tf_mlp")["platform"] == "tensorflow_savedmodel"
    auto = client.get_model_config("tf_auto")
    assert auto["platform"] == "tensorflow_savedmodel" and auto["backend"] == "tensorflow"
    assert auto["max_batch_size"] == 4 and "dynamic_batching" in auto
    assert [(i["name"], i["data_type"], i["dims"]) for i in auto["input"]] == [
        ("features", "TYPE_FP32", [8])
    ]
    assert sorted(o["name"] for o in auto["output"]) == ["probabilities", "scores"]
    text = client.get_model_config("tf_text")
    assert text["max_batch_size"] == 0
    assert sorted((o["name"], o["data_type"]) for o in text["output"]) == [
        ("length", "TYPE_INT32"),
        ("upper", "TYPE_STRING"),
    ]


def test_a_signature_the_saved_model_lacks_fails_the_load_naming_it(
    tf_mesh: tuple[Mesh, int],
) -> None:
    client = httpclient.InferenceServerClient(tf_mesh[0].url)
    assert not client.is_model_ready("tf_bad")
    entries = {e["name"]: e for e in client.get_model_repository_index()}
    assert "expected 'scoring' signature" in entries["tf_bad"].get("reason", ""), entries["tf_bad"]


def test_http_and_grpc_answers_equal_tensorflow(
    tf_mesh: tuple[Mesh, int], reference: dict[str, Any]
) -> None:
    mesh, grpc_port = tf_mesh
    x = _features(3, seed=1)
    expected = _expected_mlp(reference, x)
    http = httpclient.InferenceServerClient(mesh.url)
    tensor = httpclient.InferInput("features", [3, 8], "FP32")
    tensor.set_data_from_numpy(x)
    result = http.infer("tf_mlp", [tensor])
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    gtensor = grpcclient.InferInput("features", [3, 8], "FP32")
    gtensor.set_data_from_numpy(x)
    gresult = grpc.infer("tf_mlp", [gtensor])
    for name in ("scores", "probabilities"):
        np.testing.assert_allclose(result.as_numpy(name), expected[name], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(gresult.as_numpy(name), expected[name], rtol=1e-6, atol=1e-6)
    # The auto-completed model serves the same SavedModel: the same answers.
    auto = http.infer("tf_auto", [tensor])
    np.testing.assert_allclose(auto.as_numpy("scores"), expected["scores"], rtol=1e-6, atol=1e-6)


async def test_concurrent_requests_are_batched_and_split_back(
    tf_mesh: tuple[Mesh, int], reference: dict[str, Any]
) -> None:
    mesh = tf_mesh[0]
    client = aiohttpclient.InferenceServerClient(mesh.url)
    rows = [_features(1, seed=100 + i) for i in range(48)]
    try:
        before = (await client.get_inference_statistics("tf_mlp"))["model_stats"][0]

        async def one(x: np.ndarray) -> np.ndarray:
            tensor = aiohttpclient.InferInput("features", [1, 8], "FP32")
            tensor.set_data_from_numpy(x)
            result = await client.infer("tf_mlp", [tensor])
            scores: np.ndarray = result.as_numpy("scores")
            return scores

        answers = await asyncio.gather(*(one(x) for x in rows))
        after = (await client.get_inference_statistics("tf_mlp"))["model_stats"][0]
    finally:
        await client.close()
    for x, answer in zip(rows, answers, strict=True):
        np.testing.assert_allclose(
            answer, _expected_mlp(reference, x)["scores"], rtol=1e-6, atol=1e-6
        )
    inferences = int(after["inference_count"]) - int(before["inference_count"])
    executions = int(after["execution_count"]) - int(before["execution_count"])
    assert inferences == 48
    assert executions < 48, "the requests were never executed together"
    assert max(int(b["batch_size"]) for b in after["batch_stats"]) > 1


def test_unbatched_bytes_through_a_named_signature(
    tf_mesh: tuple[Mesh, int], reference: dict[str, Any]
) -> None:
    mesh, grpc_port = tf_mesh
    words = np.array(["naïve".encode(), b"Conch", b""], dtype=object)
    expected = reference["tf_text"]["text_stats"](text=tf.constant(words))
    http = httpclient.InferenceServerClient(mesh.url)
    tensor = httpclient.InferInput("text", [3], "BYTES")
    tensor.set_data_from_numpy(words)
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    gtensor = grpcclient.InferInput("text", [3], "BYTES")
    gtensor.set_data_from_numpy(words)
    for result in (http.infer("tf_text", [tensor]), grpc.infer("tf_text", [gtensor])):
        np.testing.assert_array_equal(result.as_numpy("length"), expected["length"].numpy())
        assert list(result.as_numpy("upper")) == list(expected["upper"].numpy())
        assert result.as_numpy("length").tolist() == [5, 5, 0]  # UTF-8 characters


def test_bad_inputs_are_refused_naming_what_was_expected(tf_mesh: tuple[Mesh, int]) -> None:
    client = httpclient.InferenceServerClient(tf_mesh[0].url)
    wrong_shape = httpclient.InferInput("features", [1, 7], "FP32")
    wrong_shape.set_data_from_numpy(np.zeros((1, 7), np.float32))
    wrong_type = httpclient.InferInput("features", [1, 8], "INT32")
    wrong_type.set_data_from_numpy(np.zeros((1, 8), np.int32))
    wrong_name = httpclient.InferInput("x", [1, 8], "FP32")
    wrong_name.set_data_from_numpy(np.zeros((1, 8), np.float32))
    too_many = httpclient.InferInput("features", [33, 8], "FP32")
    too_many.set_data_from_numpy(_features(33, seed=2))
    for tensor, words in (
        (wrong_shape, ["features", "[1,7]"]),
        (wrong_type, ["features", "INT32", "FP32"]),
        (wrong_name, ["x"]),
        (too_many, ["33", "32"]),
    ):
        with pytest.raises(InferenceServerException) as info:
            client.infer("tf_mlp", [tensor])
        assert info.value.status() == "400", info.value
        message = str(info.value).replace(" ", "")
        for word in words:
            assert word.replace(" ", "") in message, (word, str(info.value))
