"""No request is lost: a worker SIGKILLed mid-batch, a mesh without workers, and recovery."""

from __future__ import annotations

import asyncio
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient
from onnx import TensorProto, helper, numpy_helper
from tritonclient.utils import InferenceServerException

from conch.private_redis import PrivateRedis
from shared.wire import keys
from tests.mesh import Mesh, flush_database, sync_redis
from tests.waiting import retrying_sync, until

pytestmark = pytest.mark.e2e

WIDTH = 1024
LAYERS = 8


def write_slow_model(repo: Path) -> None:
    """An MLP deep enough that a batch takes tens of milliseconds: work stays in flight."""
    rng = np.random.default_rng(7)
    nodes, inits, x = [], [], "INPUT0"
    for i in range(LAYERS):
        w = (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"W{i}"))
        out = "OUTPUT0" if i == LAYERS - 1 else f"H{i}"
        nodes.append(helper.make_node("MatMul", [x, f"W{i}"], [out]))
        x = out
    graph = helper.make_graph(
        nodes,
        "slow",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["b", WIDTH])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["b", WIDTH])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (repo / "slow" / "1").mkdir(parents=True)
    onnx.save(model, repo / "slow" / "1" / "model.onnx")
    (repo / "slow" / "config.pbtxt").write_text(
        'name: "slow"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 64\n'
        f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {WIDTH} ] }} ]\n'
        f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {WIDTH} ] }} ]\n'
        "dynamic_batching { max_queue_delay_microseconds: 500 }\n"
    )


@pytest.fixture(scope="module")
def recovery_mesh(
    redis_server: PrivateRedis, model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Mesh]:
    repo = tmp_path_factory.mktemp("recovery_repo")
    shutil.copytree(model_repository / "simple", repo / "simple")
    write_slow_model(repo)
    flush_database(redis_server.url)
    mesh = Mesh(redis_server.url, repo, log_dir=tmp_path_factory.mktemp("logs"))
    # Shorter bounds than the defaults, so that a killed worker's batches are taken over and a
    # fleet without workers is refused within the seconds a test may take (defaults: a dead
    # bound of 10 s, a gone bound of 30 s).
    mesh.env_overrides.update(
        {
            "CONCH_WORKER_DEAD_BOUND_MS": "4000",
            "CONCH_SCHEDULER_DEAD_BOUND_MS": "4000",
            "CONCH_GATEWAY_GONE_BOUND_MS": "1000",
        }
    )
    try:
        mesh.start_scheduler()
        mesh.start_worker("worker-a")
        mesh.start_gateway()
        mesh.wait_ready(["simple", "slow"])
        yield mesh
    finally:
        mesh.stop()


def expected_slow(repo: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(repo / "slow" / "1" / "model.onnx"))
    return session.run(["OUTPUT0"], {"INPUT0": x})[0]


async def test_worker_killed_mid_batch_loses_no_request(recovery_mesh: Mesh) -> None:
    mesh = recovery_mesh
    rng = np.random.default_rng(11)
    inputs = [rng.standard_normal((16, WIDTH)).astype(np.float32) for _ in range(40)]
    client = aiohttpclient.InferenceServerClient(mesh.url, conn_limit=64)
    done: list[int] = []

    async def one(index: int) -> np.ndarray:
        tensor = aiohttpclient.InferInput("INPUT0", [16, WIDTH], "FP32")
        tensor.set_data_from_numpy(inputs[index], binary_data=True)
        result = await client.infer("slow", [tensor], request_id=str(index))
        done.append(index)
        return result.as_numpy("OUTPUT0")

    try:
        tasks = [asyncio.create_task(one(i)) for i in range(40)]
        # Let the worker take batches, then kill it without warning.
        r = sync_redis(mesh.redis_url)
        stream = keys.batch_stream("slow", 1)
        await until(lambda: r.xpending(stream, keys.WORKER_GROUP)["pending"] > 0, 10, every=0.005)
        mesh.kill("worker-a", signal.SIGKILL)
        answered_at_kill = len(done)
        left_behind = r.xlen(keys.batch_stream("slow", 1))
        assert answered_at_kill < 40
        assert left_behind > 0, "the killed worker left no batch behind; nothing was tested"
        await asyncio.sleep(0.3)
        mesh.start_worker("worker-b")
        results = await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
    finally:
        await client.close()
    expected = expected_slow(mesh.repository, np.concatenate(inputs))
    np.testing.assert_allclose(np.concatenate(results), expected, rtol=1e-4, atol=1e-4)
    assert sorted(done) == list(range(40))
    # Nothing is left pending once the replacement has finished the work.
    assert r.xpending(keys.batch_stream("slow", 1), keys.WORKER_GROUP)["pending"] == 0


def test_no_live_worker_is_a_503_naming_the_model(recovery_mesh: Mesh) -> None:
    mesh = recovery_mesh
    for name in [n for n in mesh.processes if n.startswith("worker")]:
        mesh.kill(name, signal.SIGTERM)  # a clean stop leaves the registry at once
    client = httpclient.InferenceServerClient(mesh.url)
    tensor_a = httpclient.InferInput("INPUT0", [1, 16], "INT32")
    tensor_a.set_data_from_numpy(np.ones((1, 16), np.int32))
    tensor_b = httpclient.InferInput("INPUT1", [1, 16], "INT32")
    tensor_b.set_data_from_numpy(np.ones((1, 16), np.int32))
    started = time.monotonic()
    with pytest.raises(InferenceServerException) as info:
        client.infer("simple", [tensor_a, tensor_b])
    assert time.monotonic() - started < 2, "a request without a worker must be refused at once"
    assert info.value.status() == "503"
    assert "simple" in str(info.value) and "worker" in str(info.value)
    assert not client.is_model_ready("simple")
    # A new worker brings the model back.
    mesh.start_worker("worker-c")
    mesh.wait_ready(["simple"])
    result = client.infer("simple", [tensor_a, tensor_b])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), 2))


async def test_two_schedulers_one_killed_each_request_executed_once(recovery_mesh: Mesh) -> None:
    mesh = recovery_mesh
    if not any(n.startswith("worker") for n in mesh.processes):
        mesh.start_worker("worker-d")
    mesh.start_scheduler("scheduler-2")
    mesh.wait_ready(["slow"])
    client = aiohttpclient.InferenceServerClient(mesh.url, conn_limit=64)
    before = (await client.get_inference_statistics("slow"))["model_stats"][0]
    rng = np.random.default_rng(5)
    inputs = [rng.standard_normal((4, WIDTH)).astype(np.float32) for _ in range(60)]

    async def one(index: int) -> np.ndarray:
        tensor = aiohttpclient.InferInput("INPUT0", [4, WIDTH], "FP32")
        tensor.set_data_from_numpy(inputs[index], binary_data=True)
        return (await client.infer("slow", [tensor])).as_numpy("OUTPUT0")

    try:
        tasks = [asyncio.create_task(one(i)) for i in range(60)]
        await asyncio.sleep(0.05)
        mesh.kill("scheduler", signal.SIGKILL)  # its queued requests go to scheduler-2
        results = await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
        after = (await client.get_inference_statistics("slow"))["model_stats"][0]
    finally:
        await client.close()
    expected = expected_slow(mesh.repository, np.concatenate(inputs))
    np.testing.assert_allclose(np.concatenate(results), expected, rtol=1e-4, atol=1e-4)
    # 60 requests of 4 rows: 240 inferences, none executed twice.
    assert int(after["inference_count"]) - int(before["inference_count"]) == 240


def test_the_mesh_recovers_when_redis_restarts_empty(
    model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A Redis without persistence that restarts loses streams, groups, scripts and the
    registry; the services put back what they own and serve again without a restart."""
    server = PrivateRedis().start()
    mesh = Mesh(server.url, model_repository, log_dir=tmp_path_factory.mktemp("restart_logs"))
    client = httpclient.InferenceServerClient(mesh.url)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    try:
        mesh.start_all()
        mesh.wait_ready(["simple"])
        np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), 2 * a)
        server.stop()
        restarted = PrivateRedis(port=server.port, persistent_dir=server.dir).start()
        try:
            result = retrying_sync(  # answers come back once heartbeats restore the registry
                lambda: client.infer("simple", inputs),
                30,
                every=0.3,
                errors=InferenceServerException,
            )
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * a)
            for _ in range(20):  # and keep coming, through every service
                np.testing.assert_array_equal(
                    client.infer("simple", inputs).as_numpy("OUTPUT1"), np.zeros((1, 16))
                )
        finally:
            mesh.stop()
            restarted.stop()
    finally:
        mesh.stop()
        server.stop()
