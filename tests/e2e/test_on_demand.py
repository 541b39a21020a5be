"""on_demand model control end to end (issue 31): real gateways, scheduler (the placer), ONNX
Runtime workers and Redis, called with tritonclient.

- A cold model answers its first request, over HTTP and gRPC, with what its weights compute.
- 100 concurrent first requests through two gateways cause exactly one load.
- A pinned model (--load-model) is ready at start and never leaves; an idle copy is dropped.
- A hot model gets a second copy on the other worker, and loses it once traffic stops.
- A worker killed while it loads leaves nothing stuck in LOADING: the load goes elsewhere.
- A full budget evicts the least recently used idle model, not the one just used.
"""

from __future__ import annotations

import itertools
import signal
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import numpy.typing as npt
import pytest
import redis
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from bench.many_models import repository
from conch.ports import free_port
from conch.private_redis import PrivateRedis
from shared.fleet import control
from shared.wire import keys
from tests.mesh import Mesh, flush_database
from tests.waiting import eventually_sync, until_sync

pytestmark = pytest.mark.e2e

MODELS = 8
PINNED = repository.model_name(7)
HOT = repository.model_name(3)  # max_batch_size 1: one copy serves one request at a time
IDLE_S = 3.0


def on_demand_env(prefix: str) -> dict[str, str]:
    return {f"CONCH_{prefix}_MODEL_CONTROL_MODE": "on_demand"}


def expected(index: int, x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """What model ``index`` computes: the MLP of bench.many_models with its own weights."""
    layers = repository.weights(index)
    for i, w in enumerate(layers):
        x = x @ w
        if i < len(layers) - 1:
            x = np.maximum(x, 0)
    return x


def request(seed: int) -> npt.NDArray[np.float32]:
    return np.random.default_rng(seed).standard_normal((1, 64), dtype=np.float32)


def infer_http(url: str, index: int, seed: int = 0) -> npt.NDArray[np.float32]:
    client = httpclient.InferenceServerClient(url, network_timeout=120)
    x = request(seed)
    inputs = [httpclient.InferInput("INPUT0", list(x.shape), "FP32")]
    inputs[0].set_data_from_numpy(x)
    out = client.infer(repository.model_name(index), inputs).as_numpy("OUTPUT0")
    assert out is not None
    return out


def index_of(url: str) -> dict[str, dict[str, str]]:
    """The repository index by model name (one version each here)."""
    entries = httpx.post(f"http://{url}/v2/repository/index", json={}, timeout=10).json()
    return {e["name"]: e for e in entries}


def targeted_loads(r: redis.Redis, model: str) -> list[control.ControlMessage]:
    """Every targeted LOAD the placer sent for ``model`` (the control stream keeps them)."""
    messages = [
        control.decode_message(fields[keys.FIELD_DATA])
        for _, fields in r.xrange(keys.control_stream())
    ]
    return [m for m in messages if m.model == model and m.action == control.LOAD and m.target]


def holders(url: str, model: str) -> list[str]:
    """The workers holding ``model`` (the index's "loaded on" reason), none if not READY."""
    entry = index_of(url).get(model, {})
    if entry.get("state") != "READY":
        return []
    return entry.get("reason", "").removeprefix("loaded on ").split(", ")


def worker_id(r: redis.Redis, pid: int) -> str:
    """The id of the live worker whose process is ``pid`` (its heartbeat info says)."""
    for member in r.zrange(keys.service_registry("worker"), 0, -1):
        wid = member.decode()
        if r.hget(keys.service_info("worker", wid), "pid") == str(pid).encode():
            return wid
    raise AssertionError(f"no live worker with pid {pid}")


@dataclass
class OnDemandMesh:
    mesh: Mesh
    second_url: str
    grpc_url: str
    redis: redis.Redis


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("on_demand_repo")
    repository.write(repo, MODELS)
    hot = repo / HOT / "config.pbtxt"
    hot.write_text(hot.read_text().replace("max_batch_size: 32", "max_batch_size: 1"))
    return repo


@pytest.fixture(scope="module")
def od(
    redis_server: PrivateRedis, models: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OnDemandMesh]:
    flush_database(redis_server.url)
    grpc_port, second = free_port(), free_port()
    mesh = Mesh(redis_server.url, models, log_dir=tmp_path_factory.mktemp("on_demand_logs"))
    mesh.start_scheduler(
        **on_demand_env("SCHEDULER"),
        CONCH_SCHEDULER_MODEL_IDLE_UNLOAD_S=str(IDLE_S),
        CONCH_SCHEDULER_MODEL_MIN_COPIES="0",
    )
    # Budgets differ so that best fit places a first load on worker-a (the smaller).
    for name, budget in (("worker-a", "256MiB"), ("worker-b", "512MiB")):
        mesh.start_worker(
            name,
            **on_demand_env("WORKER"),
            CONCH_WORKER_LOAD_MODELS=PINNED,
            CONCH_WORKER_MODEL_MEMORY_BUDGET=budget,
        )
    gateway_env = {**on_demand_env("GATEWAY"), "CONCH_GATEWAY_REPOSITORY_REQUIRES_ADMIN": "false"}
    mesh.start_gateway(1, CONCH_GATEWAY_GRPC_PORT=str(grpc_port), **gateway_env)
    mesh.start_gateway(1, name="gateway-2", CONCH_GATEWAY_HTTP_PORT=str(second), **gateway_env)
    client = redis.Redis.from_url(redis_server.url)
    try:
        mesh.wait_ready(
            [PINNED], timeout_s=120, urls=[f"http://{mesh.url}", f"http://localhost:{second}"]
        )
        yield OnDemandMesh(mesh, f"localhost:{second}", f"localhost:{grpc_port}", client)
    finally:
        client.close()
        mesh.stop()


def test_every_model_is_indexed_and_only_the_pinned_one_loaded(od: OnDemandMesh) -> None:
    entries = index_of(od.mesh.url)
    assert sorted(entries) == [repository.model_name(i) for i in range(MODELS)]
    assert entries[PINNED]["state"] == "READY"
    assert len(holders(od.mesh.url, PINNED)) == 2  # pinned on both workers
    cold = [e for n, e in entries.items() if n != PINNED]
    assert all(e["state"] == "UNAVAILABLE" for e in cold), cold


def test_a_cold_model_answers_its_first_request(od: OnDemandMesh) -> None:
    x = request(1)
    np.testing.assert_allclose(
        infer_http(od.mesh.url, 1, seed=1), expected(1, x), rtol=1e-4, atol=1e-5
    )
    assert len(holders(od.mesh.url, repository.model_name(1))) == 1
    client = grpcclient.InferenceServerClient(od.grpc_url)
    inputs = [grpcclient.InferInput("INPUT0", [1, 64], "FP32")]
    inputs[0].set_data_from_numpy(request(2))
    result = client.infer(repository.model_name(4), inputs, client_timeout=120)
    np.testing.assert_allclose(
        result.as_numpy("OUTPUT0"), expected(4, request(2)), rtol=1e-4, atol=1e-5
    )
    metrics = httpx.get(f"http://{od.mesh.url}/metrics", timeout=10).text
    assert 'conch_model_demand_total{outcome="miss"}' in metrics
    assert "conch_model_cold_start_seconds_count" in metrics


def test_100_concurrent_first_requests_through_two_gateways_load_once(od: OnDemandMesh) -> None:
    index = 2
    urls = itertools.cycle([od.mesh.url, od.second_url])
    jobs = [(next(urls), seed) for seed in range(100)]
    with ThreadPoolExecutor(max_workers=50) as pool:
        answers = list(pool.map(lambda job: infer_http(job[0], index, job[1]), jobs))
    for (_, seed), answer in zip(jobs, answers, strict=True):
        np.testing.assert_allclose(answer, expected(index, request(seed)), rtol=1e-4, atol=1e-5)
    assert len(targeted_loads(od.redis, repository.model_name(index))) == 1
    assert len(holders(od.mesh.url, repository.model_name(index))) == 1


def test_a_hot_model_gets_a_second_copy_and_loses_it_when_traffic_stops(
    od: OnDemandMesh,
) -> None:
    index = int(HOT[1:])
    stop = threading.Event()
    failures: list[BaseException] = []

    def load(url: str) -> None:
        while not stop.is_set():
            try:
                infer_http(url, index)
            except BaseException as exc:
                failures.append(exc)
                return

    threads = [
        threading.Thread(target=load, args=(u,), daemon=True)
        for u in [od.mesh.url, od.second_url] * 6
    ]
    for thread in threads:
        thread.start()
    try:
        two = until_sync(lambda: len(holders(od.mesh.url, HOT)) == 2, 60, every=0.2)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    assert failures == []
    assert two, index_of(od.mesh.url).get(HOT)
    # Idle for IDLE_S with --model-min-copies 0: both copies go, one tick at a time.
    assert until_sync(lambda: holders(od.mesh.url, HOT) == [], IDLE_S * 2 + 30, every=0.5)
    assert PINNED in index_of(od.mesh.url) and len(holders(od.mesh.url, PINNED)) == 2


def test_a_worker_killed_mid_load_leaves_nothing_loading(od: OnDemandMesh) -> None:
    model = repository.model_name(5)
    victim = worker_id(od.redis, od.mesh.pid("worker-a"))
    od.mesh.signal("worker-a", signal.SIGSTOP)  # it takes the load and never finishes it
    answer: list[npt.NDArray[np.float32]] = []
    caller = threading.Thread(target=lambda: answer.append(infer_http(od.mesh.url, 5, 3)))
    caller.start()
    try:
        placed = eventually_sync(
            lambda: od.redis.hget(keys.placements(), model), lambda p: p is not None, 30
        )
        assert placed is not None and victim.encode() in placed
        assert index_of(od.mesh.url)[model]["state"] == "LOADING"
        od.mesh.kill("worker-a")
        caller.join(timeout=90)
        assert answer, "the request was not answered after the loading worker died"
        np.testing.assert_allclose(answer[0], expected(5, request(3)), rtol=1e-4, atol=1e-5)
        assert holders(od.mesh.url, model) and victim not in holders(od.mesh.url, model)
        loads = targeted_loads(od.redis, model)
        assert [m.reason for m in loads] == ["demand", "retry"]
        # The placer ends the placement at its next tick once the worker answered.
        assert until_sync(lambda: od.redis.hget(keys.placements(), model) is None, 10)
    finally:
        od.mesh.signal("worker-a", signal.SIGCONT)
        if "worker-a" not in od.mesh.processes:
            od.mesh.restart("worker-a")
