"""Ragged batching and ``preserve_ordering`` through a mesh of real processes, as a Triton user
sees them with tritonclient.

- ``ragged``: a Python model whose input has ``allow_ragged_batch`` and a ``batch_input``
  (``BATCH_ACCUMULATED_ELEMENT_COUNT``). Requests of different lengths sent together form one
  batch (the model's view: how many requests its execute got; Triton's batch statistics) and
  each gets its own answer and its own part of the batch input.
- ``ragged_onnx``: the same through ONNX Runtime, which gets the batch as Triton's backends do:
  the ragged input flattened into one 1-D tensor, the batch input as one tensor, and its output
  scattered back by ``batch_output`` (``BATCH_SCATTER_WITH_INPUT_SHAPE``).
- ``ordered`` / ``unordered``: two instances, one request per batch, a slow request then a
  quick one. With ``preserve_ordering`` the quick one's response waits for the slow one's; the
  twin without it shows the order would otherwise flip (so the test can fail).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import onnx
import pytest
import tritonclient.http.aio as aiohttpclient
from onnx import TensorProto, helper, numpy_helper

from conch.ports import free_port
from conch.private_redis import PrivateRedis
from tests.mesh import Mesh, flush_database
from tests.waiting import until

pytestmark = pytest.mark.e2e

RAGGED_MODEL = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            index = pb_utils.get_input_tensor_by_name(request, "INDEX").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT", x * 2),
                pb_utils.Tensor("ACC", index.reshape(1, -1).astype(np.float32)),
                pb_utils.Tensor("COUNT", np.array([[len(requests)]], dtype=np.int32)),
            ]))
        return responses
"""

RAGGED_CONFIG = """\
name: "ragged"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
batch_input [ { kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "INDEX"
                data_type: TYPE_FP32 source_input: "INPUT" } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ -1 ] },
         { name: "ACC" data_type: TYPE_FP32 dims: [ -1 ] },
         { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]
dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 1000000 }
"""

SLEEPER_MODEL = """\
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            delay = pb_utils.get_input_tensor_by_name(request, "DELAY_MS").as_numpy()
            time.sleep(float(delay.reshape(-1)[0]) / 1000)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("ECHO", delay)]))
        return responses
"""

SLEEPER_CONFIG = """\
name: "{name}"
backend: "python"
max_batch_size: 1
input [ {{ name: "DELAY_MS" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "ECHO" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ count: 2 kind: KIND_CPU }} ]
dynamic_batching {{ preserve_ordering: {ordered} }}
"""


ONNX_CONFIG = """\
name: "ragged_onnx"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
batch_input [ { kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "INDEX"
                data_type: TYPE_FP32 source_input: "INPUT" } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ -1 ] },
         { name: "ENDS" data_type: TYPE_FP32 dims: [ 1 ] } ]
batch_output [ { target_name: "OUTPUT" kind: BATCH_SCATTER_WITH_INPUT_SHAPE
                 source_input: "INPUT" } ]
dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 1000000 }
"""


def _doubler() -> onnx.ModelProto:
    """OUTPUT = 2 * INPUT over the flat ragged input; ENDS = INDEX (one value per request)."""
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["INPUT", "TWO"], ["OUTPUT"]),
            helper.make_node("Identity", ["INDEX"], ["ENDS"]),
        ],
        "ragged",
        [
            helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["n"]),
            helper.make_tensor_value_info("INDEX", TensorProto.FLOAT, ["b"]),
        ],
        [
            helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, ["n"]),
            helper.make_tensor_value_info("ENDS", TensorProto.FLOAT, ["b"]),
        ],
        [numpy_helper.from_array(np.array(2.0, dtype=np.float32), "TWO")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def write_repository(repo: Path) -> None:
    (repo / "ragged_onnx" / "1").mkdir(parents=True)
    onnx.save(_doubler(), repo / "ragged_onnx" / "1" / "model.onnx")
    (repo / "ragged_onnx" / "config.pbtxt").write_text(ONNX_CONFIG)
    models = [("ragged", RAGGED_MODEL, RAGGED_CONFIG)]
    for name, ordered in (("ordered", "true"), ("unordered", "false")):
        models.append((name, SLEEPER_MODEL, SLEEPER_CONFIG.format(name=name, ordered=ordered)))
    for name, code, config in models:
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(code)
        (repo / name / "config.pbtxt").write_text(config)


@dataclass
class RaggedMesh:
    mesh: Mesh
    worker_metrics: str


@pytest.fixture(scope="module")
def ragged_mesh(
    redis_server: PrivateRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RaggedMesh]:
    repo = tmp_path_factory.mktemp("ragged_repo")
    write_repository(repo)
    flush_database(redis_server.url)
    mesh = Mesh(redis_server.url, repo, log_dir=tmp_path_factory.mktemp("logs"))
    port = free_port()
    try:
        mesh.start_scheduler()
        mesh.start_worker("worker-py", backend="python", CONCH_WORKER_HEALTH_PORT=str(port))
        mesh.start_worker("worker-onnx")
        mesh.start_gateway(processes=1)
        mesh.wait_ready(["ragged", "ragged_onnx", "ordered", "unordered"], timeout_s=180)
        yield RaggedMesh(mesh, f"http://127.0.0.1:{port}/metrics")
    finally:
        mesh.stop()


LENGTHS = [2, 3, 5, 7]


def _send_together(url: str, model: str, outputs: tuple[str, ...]) -> list[dict[str, np.ndarray]]:
    """One request per length, all at once; each request's outputs."""

    async def send() -> list[dict[str, np.ndarray]]:
        client = aiohttpclient.InferenceServerClient(url)
        try:

            async def one(n: int) -> dict[str, np.ndarray]:
                x = np.arange(1, n + 1, dtype=np.float32).reshape(1, n)
                tensor = aiohttpclient.InferInput("INPUT", [1, n], "FP32")
                tensor.set_data_from_numpy(x)
                result = await client.infer(model, [tensor])
                return {name: result.as_numpy(name) for name in outputs}

            return await asyncio.gather(*(one(n) for n in LENGTHS))
        finally:
            await client.close()

    return asyncio.run(send())


def _check_ends(ends: list[float]) -> None:
    """Each request's accumulated count ends its own elements in the batch's concatenation."""
    previous = 0.0
    for end, n in sorted(zip(ends, LENGTHS, strict=True)):
        assert end - previous == n
        previous = end


def _batch_sizes(url: str, model: str) -> set[int]:
    stats = httpx.get(f"http://{url}/v2/models/{model}/stats", timeout=5).json()
    return {b["batch_size"] for b in stats["model_stats"][0]["batch_stats"]}


def test_requests_of_different_lengths_share_one_batch(ragged_mesh: RaggedMesh) -> None:
    url = ragged_mesh.mesh.url
    answers = _send_together(url, "ragged", ("OUTPUT", "ACC", "COUNT"))
    for n, answer in zip(LENGTHS, answers, strict=True):
        expected = np.arange(1, n + 1, dtype=np.float32).reshape(1, n) * 2
        np.testing.assert_array_equal(answer["OUTPUT"], expected)
        assert answer["COUNT"].tolist() == [[4]]  # the model saw all four in one execute
    _check_ends([float(a["ACC"].reshape(-1)[-1]) for a in answers])
    assert _batch_sizes(url, "ragged") == {4}


def test_a_tensor_backend_gets_the_flat_batch_and_scatters_it_back(
    ragged_mesh: RaggedMesh,
) -> None:
    url = ragged_mesh.mesh.url
    answers = _send_together(url, "ragged_onnx", ("OUTPUT", "ENDS"))
    for n, answer in zip(LENGTHS, answers, strict=True):
        expected = np.arange(1, n + 1, dtype=np.float32).reshape(1, n) * 2
        np.testing.assert_array_equal(answer["OUTPUT"], expected)
    _check_ends([float(a["ENDS"].reshape(-1)[-1]) for a in answers])
    assert _batch_sizes(url, "ragged_onnx") == {4}


def _in_flight(url: str, model: str) -> float:
    for line in httpx.get(url, timeout=5).text.splitlines():
        if line.startswith("conch_worker_executions_in_flight{") and f'model="{model}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _finishing_order(ragged_mesh: RaggedMesh, model: str) -> list[int]:
    """A slow request (1.5 s), then, once it executes, a quick one: which answer came first."""

    async def run() -> list[int]:
        client = aiohttpclient.InferenceServerClient(ragged_mesh.mesh.url)
        order: list[int] = []
        try:

            async def one(delay: int) -> None:
                tensor = aiohttpclient.InferInput("DELAY_MS", [1, 1], "INT32")
                tensor.set_data_from_numpy(np.array([[delay]], dtype=np.int32))
                await client.infer(model, [tensor])
                order.append(delay)

            slow = asyncio.create_task(one(1500))
            assert await until(lambda: _in_flight(ragged_mesh.worker_metrics, model) >= 1, 10)
            await asyncio.gather(slow, one(0))
        finally:
            await client.close()
        return order

    return asyncio.run(run())


def test_preserve_ordering_holds_a_quick_response_behind_a_slow_one(
    ragged_mesh: RaggedMesh,
) -> None:
    # Without preserve_ordering the quick request, run by the second instance, answers first.
    assert _finishing_order(ragged_mesh, "unordered") == [0, 1500]
    assert _finishing_order(ragged_mesh, "ordered") == [1500, 0]
