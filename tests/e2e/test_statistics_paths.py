"""Triton's statistics add up on every path (issue 28): ``compute_input`` and ``compute_output``
are measured for an idle model's batch of one (the direct path, ``shared.fleet.direct_path``) as
for a batch the scheduler assembled, the worker's ``nv_inference_compute_*_duration_us`` say the
same, and ``response_stats`` is filled per response index, for an ordinary model (response 0)
and for a decoupled one (``square_int32``: n responses, then a final flag with no response),
over HTTP and gRPC.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper

from conch.ports import free_port
from conch.private_redis import PrivateRedis
from tests.mesh import Mesh, flush_database
from tests.waiting import until_sync

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
MAKE_MODELS = ROOT / "examples" / "make_backend_models.py"
WIDTH = 4096
TENSORS = (
    f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {WIDTH} ] }} ]\n'
    f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {WIDTH} ] }} ]\n'
)


def _plus_one() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Add", ["INPUT0", "ONE"], ["OUTPUT0"])],
        "plus_one",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["b", WIDTH])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["b", WIDTH])],
        [helper.make_tensor("ONE", TensorProto.FLOAT, [1], [1.0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def write_repository(repo: Path, queue_delay_us: int = 200_000) -> None:
    """``direct``: no queue delay (an idle model's request runs at once, as a batch of one);
    ``waits``: the batcher waits ``queue_delay_us`` for company (never direct)."""
    for name, delay in (("direct", 0), ("waits", queue_delay_us)):
        (repo / name / "1").mkdir(parents=True)
        onnx.save(_plus_one(), repo / name / "1" / "model.onnx")
        (repo / name / "config.pbtxt").write_text(
            f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 16\n'
            + TENSORS
            + f"dynamic_batching {{ max_queue_delay_microseconds: {delay} }}\n"
        )


@dataclass
class StatsMesh:
    mesh: Mesh
    grpc_url: str
    worker_metrics: str  # the onnx worker's /metrics

    @property
    def http(self) -> str:
        return f"http://{self.mesh.url}"


@pytest.fixture(scope="module")
def stats_mesh(
    redis_server: PrivateRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StatsMesh]:
    repo = tmp_path_factory.mktemp("stats_repo")
    write_repository(repo)
    subprocess.run(
        [sys.executable, str(MAKE_MODELS), str(repo), "--model", "square_int32"],
        check=True,
        capture_output=True,
    )
    flush_database(redis_server.url)
    mesh = Mesh(redis_server.url, repo, log_dir=tmp_path_factory.mktemp("stats_logs"))
    grpc_port, worker_port = free_port(), free_port()
    try:
        mesh.start_scheduler()
        mesh.start_worker("worker-onnx", CONCH_WORKER_HEALTH_PORT=str(worker_port))
        mesh.start_worker("worker-python", backend="python")
        mesh.start_gateway(processes=1, CONCH_GATEWAY_GRPC_PORT=str(grpc_port))
        mesh.wait_ready(["direct", "waits", "square_int32"], timeout_s=120)
        yield StatsMesh(mesh, f"127.0.0.1:{grpc_port}", f"http://127.0.0.1:{worker_port}/metrics")
    finally:
        mesh.stop()


def _stats(url: str, model: str) -> dict[str, Any]:
    [entry] = httpx.get(f"{url}/v2/models/{model}/stats", timeout=5).json()["model_stats"]
    return entry  # type: ignore[no-any-return]


def _grpc_stats(url: str, model: str) -> dict[str, Any]:
    client = grpcclient.InferenceServerClient(url)
    try:
        found = client.get_inference_statistics(model, as_json=True)
    finally:
        client.close()
    [entry] = found["model_stats"]
    return entry  # type: ignore[no-any-return]


def _metric(url: str, name: str, model: str) -> float:
    total = 0.0
    for line in httpx.get(url, timeout=5).text.splitlines():
        if line.startswith(name + "{") and f'model="{model}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def _infer(url: str, model: str, value: float) -> None:
    client = httpclient.InferenceServerClient(url)
    try:
        x = np.full((1, WIDTH), value, np.float32)
        tensor = httpclient.InferInput("INPUT0", [1, WIDTH], "FP32")
        tensor.set_data_from_numpy(x, binary_data=True)
        result = client.infer(model, [tensor]).as_numpy("OUTPUT0")
        np.testing.assert_array_equal(result, x + 1)
    finally:
        client.close()


def _check_adds_up(entry: dict[str, Any], requests: int) -> None:
    """Every request's phases measured, and response 0 made of them."""
    inference = entry["inference_stats"]
    assert inference["success"]["count"] == requests
    for phase in ("compute_input", "compute_infer", "compute_output"):
        assert inference[phase]["count"] == requests, phase
        assert inference[phase]["ns"] > 0, f"{phase} is 0 ns: {inference}"
    for batch in entry["batch_stats"]:
        for phase in ("compute_input", "compute_infer", "compute_output"):
            assert batch[phase]["ns"] > 0, f"batch {batch['batch_size']}'s {phase} is 0 ns"
    assert set(entry["response_stats"]) == {"0"}
    first = entry["response_stats"]["0"]
    assert first["success"]["count"] == requests
    assert first["compute_infer"]["count"] == first["compute_output"]["count"] == requests
    assert first["success"]["ns"] == first["compute_infer"]["ns"] + first["compute_output"]["ns"]
    assert first["fail"]["count"] == first["empty_response"]["count"] == 0


def test_the_direct_path_measures_input_and_output(stats_mesh: StatsMesh) -> None:
    _infer(stats_mesh.mesh.url, "direct", 1.0)  # idle: a batch of one, straight to the worker
    assert _metric(stats_mesh.worker_metrics, "conch_direct_dispatch_total", "direct") == 1
    entry = _stats(stats_mesh.http, "direct")
    _check_adds_up(entry, 1)
    assert _grpc_stats(stats_mesh.grpc_url, "direct")["response_stats"]["0"]["success"] == {
        "count": "1",  # protobuf's JSON form writes uint64 as a string
        "ns": str(entry["response_stats"]["0"]["success"]["ns"]),
    }
    # The worker's Prometheus counters are the same numbers.
    for phase in ("input", "output"):
        us = _metric(
            stats_mesh.worker_metrics, f"nv_inference_compute_{phase}_duration_us", "direct"
        )
        assert us == pytest.approx(entry["inference_stats"][f"compute_{phase}"]["ns"] / 1000)


def test_a_batch_the_scheduler_assembled_measures_input_and_output(
    stats_mesh: StatsMesh,
) -> None:
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: _infer(stats_mesh.mesh.url, "waits", float(i)), range(4)))
    entry = _stats(stats_mesh.http, "waits")
    assert entry["execution_count"] < 4  # the queue delay made a batch
    _check_adds_up(entry, 4)
    for phase in ("input", "output"):
        us = _metric(
            stats_mesh.worker_metrics, f"nv_inference_compute_{phase}_duration_us", "waits"
        )
        assert us == pytest.approx(entry["inference_stats"][f"compute_{phase}"]["ns"] / 1000)


def test_a_decoupled_model_counts_each_response(stats_mesh: StatsMesh) -> None:
    results: list[Any] = []
    client = grpcclient.InferenceServerClient(stats_mesh.grpc_url)
    try:
        client.start_stream(callback=lambda result, error: results.append(error or result))
        tensor = grpcclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([3], dtype=np.int32))
        client.async_stream_infer("square_int32", [tensor], enable_empty_final_response=True)
        until_sync(lambda: len(results) == 4, 20)
        client.stop_stream()
    finally:
        client.close()
    assert until_sync(lambda: _stats(stats_mesh.http, "square_int32")["execution_count"], 20)
    for entry in (
        _stats(stats_mesh.http, "square_int32"),
        _grpc_stats(stats_mesh.grpc_url, "square_int32"),
    ):
        responses = entry["response_stats"]
        assert set(responses) == {"0", "1", "2", "3"}
        for index in ("0", "1", "2"):
            assert int(responses[index]["success"]["count"]) == 1, responses[index]
            assert int(responses[index]["compute_output"]["ns"]) > 0
        assert int(responses["3"]["empty_response"]["count"]) == 1
        assert int(responses["3"]["success"].get("count", 0)) == 0  # gRPC JSON omits 0
    inference = _stats(stats_mesh.http, "square_int32")["inference_stats"]
    assert inference["compute_input"]["ns"] > 0 and inference["compute_output"]["ns"] > 0
