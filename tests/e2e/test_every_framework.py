"""One repository mixing every backend that runs without a GPU, started by one `conch up` as a
user starts it: ready under strict readiness (Triton's default), one worker service per
framework, and each model answering.

TensorRT is the eighth backend and needs a GPU (tests/gpu/). The seven here: ONNX Runtime,
PyTorch, Python, a Python-based backend (examples/backends/wordcount), OpenVINO, FIL and
TensorFlow.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import httpx
import numpy as np
import psutil
import pytest
import tritonclient.http as httpclient

from conch.ports import free_port
from tests.conftest import ROOT
from tests.mesh import ConchUpOutput, start_conch_up, stop_conch_up

for framework in ("torch", "openvino", "xgboost", "tensorflow"):
    pytest.importorskip(framework)
pytestmark = pytest.mark.e2e

SCRIPTS: list[list[str]] = [
    ["make_models.py", "--model", "simple"],
    ["make_backend_models.py", "--model", "torchscript_mlp", "--model", "python_probe"],
    ["make_openvino_models.py"],
    ["make_fil_models.py"],
    ["make_tensorflow_models.py"],
    ["make_python_backend_models.py", "--skip-tiny-llm"],
]
# model -> (worker service, input name, datatype, one request's array)
MODELS: dict[str, tuple[str, str, str, np.ndarray]] = {
    "simple": ("onnxruntime", "INPUT0", "INT32", np.ones((1, 16), np.int32)),
    "torchscript_mlp": ("pytorch", "INPUT__0", "FP32", np.ones((2, 4), np.float32)),
    "python_probe": ("python", "INPUT0", "INT64", np.array([[5]], np.int64)),
    "wordcount": ("python", "TEXT", "BYTES", np.array([[b"one two two"]], np.object_)),
    "openvino_mlp": ("openvino", "INPUT0", "FP32", np.ones((3, 256), np.float32)),
    "fil_xgboost": ("fil", "input__0", "FP32", np.ones((4, 16), np.float32)),
    "tf_mlp": ("tensorflow", "features", "FP32", np.ones((2, 8), np.float32)),
}


@pytest.fixture(scope="module")
def mesh_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, int]]:
    repo = tmp_path_factory.mktemp("every_framework")
    for script, *args in SCRIPTS:
        subprocess.run(
            [sys.executable, str(ROOT / "examples" / script), str(repo), *args],
            check=True,
            capture_output=True,
        )
    port = free_port()
    process = start_conch_up(repo, "--http-port", str(port), "--strict-readiness", "true")
    output = ConchUpOutput(process)
    try:
        output.wait_for(rf"Conch is ready at http://localhost:{port}", 240)
        yield f"localhost:{port}", "".join(output.seen), process.pid
    finally:
        stop_conch_up(process)


def test_one_conch_up_serves_every_framework_under_strict_readiness(
    mesh_url: tuple[str, str, int],
) -> None:
    url, said, _ = mesh_url
    assert httpx.get(f"http://{url}/v2/health/ready").status_code == 200
    for service in {worker for worker, *_ in MODELS.values()}:
        assert f'"target":"worker-{service}-0"' in said, service
    client = httpclient.InferenceServerClient(url)
    for model in MODELS:
        assert client.is_model_ready(model), model


@pytest.mark.parametrize("model", list(MODELS))
def test_each_framework_answers(mesh_url: tuple[str, str, int], model: str) -> None:
    client = httpclient.InferenceServerClient(mesh_url[0])
    inputs = _inputs(model)
    value = MODELS[model][3]
    response = client.infer(model, inputs).get_response()
    outputs = {o["name"]: o for o in response["outputs"]}
    assert outputs, model
    rows = value.shape[0]
    assert all(o["shape"][0] == rows for o in outputs.values()), (model, outputs)
    if model == "simple":
        assert client.infer(model, inputs).as_numpy("OUTPUT0").tolist() == [[2] * 16]
    if model == "wordcount":
        assert client.infer(model, inputs).as_numpy("COUNT").tolist() == [[3]]


@pytest.mark.parametrize("model", list(MODELS))
def test_each_workers_metrics_count_its_models_inferences(
    mesh_url: tuple[str, str, int], model: str
) -> None:
    """Triton's ``nv_*`` families on the worker service of each framework."""
    service, _, _, value = MODELS[model]
    metrics_url = f"http://127.0.0.1:{_health_port(mesh_url[2], service)}/metrics"
    counted = f'nv_inference_count{{model="{model}",version="1"}}'

    def count() -> float:
        for line in httpx.get(metrics_url, timeout=5).text.splitlines():
            if line.startswith(counted):
                return float(line.split()[-1])
        return 0.0

    before = count()
    httpclient.InferenceServerClient(mesh_url[0]).infer(model, _inputs(model))
    assert count() == before + value.shape[0]


def _inputs(model: str) -> list[httpclient.InferInput]:
    _, name, datatype, value = MODELS[model]
    tensor = httpclient.InferInput(name, list(value.shape), datatype)
    tensor.set_data_from_numpy(value)
    inputs = [tensor]
    if model == "simple":  # two inputs
        other = httpclient.InferInput("INPUT1", [1, 16], "INT32")
        other.set_data_from_numpy(np.ones((1, 16), np.int32))
        inputs.append(other)
    return inputs


def _health_port(conch_up: int, backend: str) -> int:
    """The health (and metrics) port `conch up` gave its worker of ``backend``."""
    for child in psutil.Process(conch_up).children(recursive=True):
        if child.cmdline()[-2:] == ["--backend", backend]:
            listening = [c for c in child.net_connections() if c.status == psutil.CONN_LISTEN]
            return int(min(c.laddr.port for c in listening))
    raise AssertionError(f"no worker of backend '{backend}' under conch up")
