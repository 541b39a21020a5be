"""The direct path across real processes (``shared.fleet.direct_path``): a request of a model whose
batcher never waits, arriving when nothing is queued or in flight, goes straight to the batch
stream as a batch of one; otherwise it is queued and batched by the scheduler as always.

Observed as a user sees it: the worker's ``conch_direct_dispatch_total``, the scheduler's
``conch_queue_duration_seconds`` count (requests it queued), and Triton's statistics (batch
sizes, execution counts). Never by timing.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnx
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient
from onnx import TensorProto, helper, numpy_helper

from conch.ports import free_port
from conch.private_redis import PrivateRedis
from shared.wire import keys
from tests.mesh import Mesh, flush_database, sync_redis
from tests.waiting import until

pytestmark = pytest.mark.e2e

WIDTH = 1024


def _mlp(layers: int) -> tuple[onnx.ModelProto, list[np.ndarray]]:
    rng = np.random.default_rng(16)
    weights = [
        (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
        for _ in range(layers)
    ]
    nodes, x = [], "INPUT0"
    for i in range(layers):
        out = "OUTPUT0" if i == layers - 1 else f"H{i}"
        nodes.append(helper.make_node("MatMul", [x, f"W{i}"], [out]))
        x = out
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["b", WIDTH])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["b", WIDTH])],
        [numpy_helper.from_array(w, f"W{i}") for i, w in enumerate(weights)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, weights


def _write(repo: Path, name: str, model: onnx.ModelProto, config: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    onnx.save(model, repo / name / "1" / "model.onnx")
    (repo / name / "config.pbtxt").write_text(f'name: "{name}"\n' + config)


def write_repository(repo: Path) -> None:
    tensors = (
        f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {WIDTH} ] }} ]\n'
        f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {WIDTH} ] }} ]\n'
    )
    small, _ = _mlp(2)
    batched = 'platform: "onnxruntime_onnx"\nmax_batch_size: 64\n' + tensors
    # queue delay 0: Triton's rule sends a request at once when an instance is idle
    _write(repo, "quick", small, batched + "dynamic_batching { max_queue_delay_microseconds: 0 }\n")
    # the same model whose batcher waits for company: never direct
    _write(
        repo, "waits", small, batched + "dynamic_batching { max_queue_delay_microseconds: 500 }\n"
    )
    # no dynamic batching (Triton's default scheduler), whole matrices: a long execution
    heavy, _ = _mlp(8)
    _write(
        repo,
        "heavy",
        heavy,
        'platform: "onnxruntime_onnx"\nmax_batch_size: 0\n'
        f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1, {WIDTH} ] }} ]\n'
        f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1, {WIDTH} ] }} ]\n',
    )
    # two steps of "quick": each step is a request of "quick", admitted like any other
    step = (
        '    {{ model_name: "quick" model_version: -1\n'
        '      input_map {{ key: "INPUT0" value: "{src}" }}\n'
        '      output_map {{ key: "OUTPUT0" value: "{dst}" }} }}'
    )
    (repo / "quick_twice" / "1").mkdir(parents=True)
    (repo / "quick_twice" / "config.pbtxt").write_text(
        'name: "quick_twice"\nplatform: "ensemble"\nmax_batch_size: 64\n'
        + tensors
        + "ensemble_scheduling {\n  step [\n"
        + step.format(src="INPUT0", dst="middle")
        + ",\n"
        + step.format(src="middle", dst="OUTPUT0")
        + "\n  ]\n}\n"
    )


@dataclass
class DirectMesh:
    mesh: Mesh
    # /metrics of the worker (direct requests) and the scheduler (queued requests)
    worker_metrics: str
    scheduler_metrics: str
    # a second gateway with CONCH_DIRECT_PATH=0
    off_url: str

    def direct(self, model: str) -> float:
        return _metric(self.worker_metrics, "conch_direct_dispatch_total", model)

    def queued(self, model: str) -> float:
        return _metric(self.scheduler_metrics, "conch_queue_duration_seconds_count", model)


def _metric(url: str, name: str, model: str) -> float:
    total = 0.0
    for line in httpx.get(url, timeout=5).text.splitlines():
        if line.startswith(name + "{") and f'model="{model}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.fixture(scope="module")
def direct_mesh(
    redis_server: PrivateRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DirectMesh]:
    repo = tmp_path_factory.mktemp("direct_repo")
    write_repository(repo)
    flush_database(redis_server.url)
    mesh = Mesh(redis_server.url, repo, log_dir=tmp_path_factory.mktemp("logs"))
    # a killed worker's batch is taken over within seconds (default dead bound: 10 s)
    mesh.env_overrides["CONCH_WORKER_DEAD_BOUND_MS"] = "3000"
    worker_port, scheduler_port, off_port = free_port(), free_port(), free_port()
    try:
        mesh.start_scheduler(CONCH_SCHEDULER_HEALTH_PORT=str(scheduler_port))
        mesh.start_worker("worker-a", CONCH_WORKER_HEALTH_PORT=str(worker_port))
        mesh.start_gateway(processes=1)
        mesh.start_gateway(
            processes=1,
            name="gateway-off",
            CONCH_GATEWAY_HTTP_PORT=str(off_port),
            CONCH_DIRECT_PATH="0",
        )
        mesh.wait_ready(["quick", "waits", "heavy", "quick_twice"], timeout_s=120)
        yield DirectMesh(
            mesh,
            f"http://127.0.0.1:{worker_port}/metrics",
            f"http://127.0.0.1:{scheduler_port}/metrics",
            f"localhost:{off_port}",
        )
    finally:
        mesh.stop()


def _tensor(x: np.ndarray) -> httpclient.InferInput:
    tensor = httpclient.InferInput("INPUT0", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=True)
    return tensor


def _expected(repo: Path, model: str, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(repo / model / "1" / "model.onnx"))
    return session.run(["OUTPUT0"], {"INPUT0": x})[0]


def _stats(url: str, model: str) -> dict[str, Any]:
    """Triton's statistics of the model's one version."""
    [entry] = httpx.get(f"http://{url}/v2/models/{model}/stats", timeout=5).json()["model_stats"]
    return entry  # type: ignore[no-any-return]


def _batch_sizes(url: str, model: str) -> dict[int, int]:
    """Triton's statistics: executions per batch size."""
    batches = _stats(url, model)["batch_stats"]
    return {b["batch_size"]: b["compute_infer"]["count"] for b in batches}


def _sequential(url: str, model: str, count: int, repo: Path) -> None:
    client = httpclient.InferenceServerClient(url)
    try:
        for i in range(count):
            x = np.full((1, WIDTH), i + 1, np.float32)
            result = client.infer(model, [_tensor(x)]).as_numpy("OUTPUT0")
            np.testing.assert_allclose(result, _expected(repo, model, x), rtol=1e-4, atol=1e-4)
    finally:
        client.close()


def test_an_idle_model_with_no_queue_delay_takes_the_direct_path(direct_mesh: DirectMesh) -> None:
    mesh = direct_mesh.mesh
    direct, queued = direct_mesh.direct("quick"), direct_mesh.queued("quick")
    before = _batch_sizes(mesh.url, "quick")
    _sequential(mesh.url, "quick", 3, mesh.repository)
    assert direct_mesh.direct("quick") == direct + 3
    assert direct_mesh.queued("quick") == queued  # the scheduler never held them
    after = _batch_sizes(mesh.url, "quick")
    assert after.get(1, 0) == before.get(1, 0) + 3
    # Triton's statistics count each as a request that was queued (for ~0) and executed once.
    inference = _stats(mesh.url, "quick")["inference_stats"]
    assert inference["queue"]["count"] == inference["success"]["count"] >= 3


def test_a_model_whose_batcher_waits_never_goes_direct(direct_mesh: DirectMesh) -> None:
    mesh = direct_mesh.mesh
    queued = direct_mesh.queued("waits")
    _sequential(mesh.url, "waits", 3, mesh.repository)
    assert direct_mesh.direct("waits") == 0
    assert direct_mesh.queued("waits") == queued + 3


def test_with_the_setting_off_nothing_goes_direct(direct_mesh: DirectMesh) -> None:
    mesh = direct_mesh.mesh
    direct, queued = direct_mesh.direct("quick"), direct_mesh.queued("quick")
    _sequential(direct_mesh.off_url, "quick", 3, mesh.repository)
    assert direct_mesh.direct("quick") == direct
    assert direct_mesh.queued("quick") == queued + 3


def test_ensemble_steps_go_direct_when_their_model_qualifies(direct_mesh: DirectMesh) -> None:
    mesh = direct_mesh.mesh
    direct, queued = direct_mesh.direct("quick"), direct_mesh.queued("quick")
    client = httpclient.InferenceServerClient(mesh.url)
    try:
        x = np.full((1, WIDTH), 0.5, np.float32)
        result = client.infer("quick_twice", [_tensor(x)]).as_numpy("OUTPUT0")
    finally:
        client.close()
    once = _expected(mesh.repository, "quick", x)
    twice = _expected(mesh.repository, "quick", once)
    np.testing.assert_allclose(result, twice, rtol=1e-3, atol=1e-3)
    assert direct_mesh.direct("quick") == direct + 2
    assert direct_mesh.queued("quick") == queued


async def test_requests_arriving_while_an_instance_is_busy_are_queued_and_batched(
    direct_mesh: DirectMesh,
) -> None:
    """The worker is frozen (SIGSTOP): the first request finds the mesh idle and goes direct;
    the others find a batch in flight and are queued, and the scheduler batches them."""
    mesh = direct_mesh.mesh
    direct, queued = direct_mesh.direct("quick"), direct_mesh.queued("quick")
    before = _batch_sizes(mesh.url, "quick")
    r = sync_redis(mesh.redis_url)
    admitted = keys.admitted("quick", "*")
    already = len(r.keys(admitted))
    client = aiohttpclient.InferenceServerClient(mesh.url, conn_limit=16)
    inputs = [np.full((1, WIDTH), i, np.float32) for i in range(8)]

    async def one(x: np.ndarray) -> np.ndarray:
        tensor = aiohttpclient.InferInput("INPUT0", [1, WIDTH], "FP32")
        tensor.set_data_from_numpy(x, binary_data=True)
        return (await client.infer("quick", [tensor])).as_numpy("OUTPUT0")

    worker = mesh.processes["worker-a"]
    worker.send_signal(signal.SIGSTOP)
    try:
        tasks = [asyncio.create_task(one(x)) for x in inputs]
        await until(lambda: len(r.keys(admitted)) >= already + 8, 20)
        assert len(r.keys(admitted)) == already + 8
    finally:
        worker.send_signal(signal.SIGCONT)
    try:
        results = await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
    finally:
        await client.close()
        r.close()
    expected = _expected(mesh.repository, "quick", np.concatenate(inputs))
    np.testing.assert_allclose(np.concatenate(results), expected, rtol=1e-4, atol=1e-4)
    assert direct_mesh.direct("quick") == direct + 1
    assert direct_mesh.queued("quick") == queued + 7
    after = _batch_sizes(mesh.url, "quick")
    grew = {size: n - before.get(size, 0) for size, n in after.items() if n > before.get(size, 0)}
    assert sum(size * n for size, n in grew.items()) == 8
    assert max(grew) > 1, f"the queued requests were never batched: {grew}"


async def test_a_worker_killed_holding_a_direct_batch_is_reclaimed_and_answered_once(
    direct_mesh: DirectMesh,
) -> None:
    mesh = direct_mesh.mesh
    stream = keys.batch_stream("heavy", 1)
    r = sync_redis(mesh.redis_url)
    x = np.random.default_rng(3).standard_normal((1024, WIDTH)).astype(np.float32)
    client = aiohttpclient.InferenceServerClient(mesh.url)
    before = _stats(mesh.url, "heavy")
    try:
        tensor = aiohttpclient.InferInput("INPUT0", [1024, WIDTH], "FP32")
        tensor.set_data_from_numpy(x, binary_data=True)
        task = asyncio.create_task(client.infer("heavy", [tensor]))
        await until(lambda: r.xpending(stream, keys.WORKER_GROUP)["pending"] > 0, 20, every=0.005)
        [(_, fields)] = r.xrange(stream)
        assert keys.FIELD_DIRECT in fields, "the request did not go direct; nothing was tested"
        mesh.kill("worker-a", signal.SIGKILL)
        assert not task.done()
        assert r.xlen(stream) == 1, "the killed worker finished the batch; nothing was tested"
        worker_port = free_port()
        mesh.start_worker("worker-b", CONCH_WORKER_HEALTH_PORT=str(worker_port))
        direct_mesh.worker_metrics = f"http://127.0.0.1:{worker_port}/metrics"
        result = (await asyncio.wait_for(task, timeout=90)).as_numpy("OUTPUT0")
    finally:
        await client.close()
    np.testing.assert_allclose(result, _expected(mesh.repository, "heavy", x), rtol=1e-3, atol=1e-3)
    # Executed and counted once (the killed worker never acked), nothing left behind.
    stats = _stats(mesh.url, "heavy")
    success = stats["inference_stats"]["success"]["count"]
    assert success == before["inference_stats"]["success"]["count"] + 1
    assert stats["execution_count"] == before["execution_count"] + 1
    assert direct_mesh.direct("heavy") == 1  # counted by the worker that ran it
    assert _metric(direct_mesh.worker_metrics, "conch_stream_entries_reclaimed_total", "heavy") >= 1
    assert r.xlen(stream) == 0
    assert r.xpending(stream, keys.WORKER_GROUP)["pending"] == 0
    assert r.xlen(keys.dead_letters("heavy")) == 0
    r.close()
