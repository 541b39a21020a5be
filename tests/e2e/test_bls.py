"""BLS across a mesh of real processes: a Python model (``bls_pipeline``) calls ``add_sub`` (ONNX
Runtime worker) with ``exec()`` and the ``add_sub_chain`` ensemble with ``await async_exec()``,
each through the called model's queue.

What a Triton user depends on: the results of the calls, their errors as
``InferenceResponse.error()`` (an unknown model, a bad shape, also through a decoupled call),
``pb_utils.is_model_ready``. (Decoupled BLS to a decoupled model: tests/e2e/test_streaming.py;
that the calls carry the caller's priority, tenant and deadline:
tests/integration/test_bls_client.py.)
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conch.private_redis import PrivateRedis
from tests.mesh import Mesh, flush_database

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bls_mesh(
    redis_server: PrivateRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Mesh]:
    repo = tmp_path_factory.mktemp("bls_repo")
    for script, names in (
        ("make_models.py", ["add_sub", "add_sub_chain"]),
        ("make_backend_models.py", ["bls_pipeline"]),
    ):
        argv = [sys.executable, str(ROOT / "examples" / script), str(repo)]
        for name in names:
            argv += ["--model", name]
        subprocess.run(argv, check=True, capture_output=True)
    flush_database(redis_server.url)
    mesh = Mesh(redis_server.url, repo, log_dir=tmp_path_factory.mktemp("logs"))
    try:
        mesh.start_scheduler()
        mesh.start_worker("worker")
        mesh.start_worker("worker-py", backend="python")
        mesh.start_gateway(processes=1)
        mesh.wait_ready(["bls_pipeline", "add_sub", "add_sub_chain"], timeout_s=120)
        yield mesh
    finally:
        mesh.stop()


def _inputs(a: np.ndarray, b: np.ndarray) -> list[httpclient.InferInput]:
    tensors = []
    for name, data in (("INPUT0", a), ("INPUT1", b)):
        tensor = httpclient.InferInput(name, list(data.shape), "FP32")
        tensor.set_data_from_numpy(data)
        tensors.append(tensor)
    return tensors


def test_a_python_model_calls_two_models_through_bls(bls_mesh: Mesh) -> None:
    client = httpclient.InferenceServerClient(bls_mesh.url)
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.full((2, 16), 3, np.float32)
    result = client.infer("bls_pipeline", _inputs(a, b))
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b)  # add_sub, exec()
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), 4 * a)  # the ensemble, async_exec()
    assert result.as_numpy("READY").tolist() == [[1, 0], [1, 0]]  # pb_utils.is_model_ready
    stats = client.get_inference_statistics("add_sub")["model_stats"][0]
    assert stats["inference_count"] >= 2 + 3 * 2  # the direct call and the ensemble's 3 steps
    # exec(decoupled=True) to an ordinary model: an iterator of its one response.
    decoupled = client.infer("bls_pipeline", _inputs(a, b), parameters={"bls_decoupled": True})
    np.testing.assert_allclose(decoupled.as_numpy("OUTPUT0"), a + b)


@pytest.mark.parametrize(
    ("parameters", "text"),
    [
        ({"bls_target": "no_such_model"}, "Request for unknown model: 'no_such_model'"),
        ({"bls_bad_shape": True}, "unexpected shape for input 'INPUT0' for model 'add_sub'"),
        (
            {"bls_decoupled": True, "bls_target": "no_such_model"},
            "Request for unknown model: 'no_such_model'",
        ),
    ],
)
def test_bls_errors_come_back_as_the_responses_error(
    bls_mesh: Mesh, parameters: dict[str, object], text: str
) -> None:
    client = httpclient.InferenceServerClient(bls_mesh.url)
    ones = np.ones((1, 16), np.float32)
    with pytest.raises(InferenceServerException) as raised:
        client.infer("bls_pipeline", _inputs(ones, ones), parameters=parameters)
    assert text in raised.value.message(), raised.value.message()
