"""The other frameworks' workers in the compose stack (profile cpu): each example model answers
through Envoy what its framework says, computed here from the same files."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.compose.conftest import ADMIN_TOKEN, GRPC, HTTP, ROOT, containers

REPOSITORY = ROOT / "examples" / "model_repository"


def _ask(protocol: str, model: str, name: str, value: np.ndarray, output: str) -> np.ndarray:
    module = httpclient if protocol == "http" else grpcclient
    client = (
        httpclient.InferenceServerClient(HTTP)
        if protocol == "http"
        else grpcclient.InferenceServerClient(GRPC)
    )
    tensor = module.InferInput(name, list(value.shape), "FP32")
    tensor.set_data_from_numpy(value)
    answer = client.infer(model, [tensor]).as_numpy(output)
    assert answer is not None
    return answer


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_openvino_answers_what_openvino_computes(protocol: str) -> None:
    ov = pytest.importorskip("openvino")
    x = np.random.default_rng(3).standard_normal((3, 256)).astype(np.float32)
    model = str(REPOSITORY / "openvino_mlp" / "1" / "model.xml")
    # f32 as the worker runs it (OpenVINO would pick bf16 on a CPU with AMX).
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    expected = compiled(x)[compiled.output(0)]
    got = _ask(protocol, "openvino_mlp", "INPUT0", x, "OUTPUT0")
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_fil_answers_what_xgboost_predicts(protocol: str) -> None:
    xgboost = pytest.importorskip("xgboost")
    x = np.random.default_rng(4).standard_normal((5, 16)).astype(np.float32)
    booster = xgboost.Booster(model_file=str(REPOSITORY / "fil_xgboost" / "1" / "xgboost.ubj"))
    p = booster.inplace_predict(x)
    got = _ask(protocol, "fil_xgboost", "input__0", x, "output__0")
    np.testing.assert_allclose(got, np.stack([1 - p, p], axis=1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_tensorflow_answers_what_the_saved_model_computes(protocol: str) -> None:
    tf = pytest.importorskip("tensorflow")
    x = np.random.default_rng(5).standard_normal((4, 8)).astype(np.float32)
    saved = tf.saved_model.load(str(REPOSITORY / "tf_mlp" / "1" / "model.savedmodel"))
    expected = saved.signatures["serving_default"](features=tf.constant(x))
    got = _ask(protocol, "tf_mlp", "features", x, "probabilities")
    np.testing.assert_allclose(got, expected["probabilities"].numpy(), rtol=1e-5, atol=1e-6)


# Each worker image carries only its own framework (docker/worker-<backend>.Dockerfile).
FRAMEWORKS = ("onnxruntime", "torch", "openvino", "xgboost", "lightgbm", "treelite", "tensorflow")
OWN = {
    "worker-onnxruntime": ["onnxruntime"],
    "worker-pytorch": ["torch"],
    "worker-python": ["torch"],  # the generative Python models import it
    "worker-openvino": ["openvino"],
    "worker-fil": ["xgboost", "lightgbm", "treelite"],
    "worker-tensorflow": ["tensorflow"],
}


@pytest.mark.parametrize("service", list(OWN))
def test_each_worker_image_carries_only_its_own_framework(service: str) -> None:
    (container, *_) = containers(service)
    probe = (
        f"import importlib.util as u; print(','.join(m for m in {FRAMEWORKS!r} if u.find_spec(m)))"
    )
    found = subprocess.run(
        ["docker", "exec", container, "python", "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    assert found.split(",") == OWN[service]


def test_every_example_model_of_the_frameworks_is_ready() -> None:
    """A framework's image missing a system library shows here (LightGBM needs libgomp)."""
    client = httpclient.InferenceServerClient(HTTP)
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    index = {m["name"]: m for m in client.get_model_repository_index(headers=headers)}
    prefixes = ("openvino_", "fil_", "tf_")
    framework_models = {n: m for n, m in index.items() if n.startswith(prefixes)}
    assert {"openvino_mlp", "fil_lightgbm", "fil_xgboost", "tf_mlp"} <= set(framework_models)
    not_ready = {n: m for n, m in framework_models.items() if m.get("state") != "READY"}
    assert not_ready == {}
