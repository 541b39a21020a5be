"""Triton's protocol extensions end to end, with tritonclient against a real mesh: shared memory
(equivalence with plain requests, a region unregistered mid-use), classification, the response
cache shared by three gateways (and serving uncached without its Redis), trace and logging
settings across the fleet, the repository extension (reload with a config override while
serving, uploaded model files, Triton's texts), header forwarding, custom metrics, Triton's
error texts that clients match on."""

from __future__ import annotations

import base64
import functools
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from conch.ports import free_port
from conch.private_redis import PrivateRedis
from tests.mesh import Mesh, flush_database
from tests.waiting import eventually_sync, until_sync

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


class Fleet:
    def __init__(self, mesh: Mesh, grpc_url: str, gateways: list[str], cache: PrivateRedis):
        """``gateways``: each gateway's ``host:port`` (the mesh's own first)."""
        self.mesh, self.grpc_url, self.gateways, self.cache = mesh, grpc_url, gateways, cache
        self.python_worker_port = 0

    def http(self, index: int = 0) -> httpclient.InferenceServerClient:
        return httpclient.InferenceServerClient(self.gateways[index])

    def grpc(self) -> grpcclient.InferenceServerClient:
        return grpcclient.InferenceServerClient(self.grpc_url)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import subprocess
    import sys

    repo = tmp_path_factory.mktemp("extensions_repository")
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "make_models.py"), str(repo)],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "make_backend_models.py"), str(repo)]
        + [f"--model={m}" for m in ("simple_string", "simple_identity", "python_probe")],
        check=True,
        capture_output=True,
    )
    return repo


@pytest.fixture(scope="module")
def fleet(
    redis_server: PrivateRedis, repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fleet]:
    flush_database(redis_server.url)
    logs = tmp_path_factory.mktemp("extension_logs")
    cache = PrivateRedis(
        extra_args=("--maxmemory", "16mb", "--maxmemory-policy", "allkeys-lru")
    ).start()
    grpc_port, python_worker_port = free_port(), free_port()
    gateway_env = {
        "CONCH_GATEWAY_CACHE_REDIS_URL": cache.url,
        "CONCH_GATEWAY_ALLOW_CLIENT_SHM": "true",
        "CONCH_GATEWAY_REPOSITORY_REQUIRES_ADMIN": "false",
        "CONCH_GATEWAY_HTTP_HEADER_FORWARD_PATTERN": "^probe_",
        "CONCH_GATEWAY_GRPC_HEADER_FORWARD_PATTERN": "^probe_",
    }
    mesh = Mesh(redis_server.url, repository, log_dir=logs)
    extra_ports = [free_port(), free_port()]
    gateways = [mesh.url] + [f"localhost:{port}" for port in extra_ports]
    try:
        mesh.start_scheduler()
        mesh.start_worker()
        mesh.start_worker(
            "python-worker", backend="python", CONCH_WORKER_HEALTH_PORT=str(python_worker_port)
        )
        mesh.start_gateway(1, CONCH_GATEWAY_GRPC_PORT=str(grpc_port), **gateway_env)
        for index, port in enumerate(extra_ports, start=2):
            mesh.start_gateway(
                1, name=f"gateway{index}", CONCH_GATEWAY_HTTP_PORT=str(port), **gateway_env
            )
        models = ["simple", "mlp", "mlp_cached", "simple_string", "simple_identity", "python_probe"]
        mesh.wait_ready(models, timeout_s=120, urls=[f"http://{url}" for url in gateways])
        found = Fleet(mesh, f"127.0.0.1:{grpc_port}", gateways, cache)
        found.python_worker_port = python_worker_port
        yield found
    finally:
        mesh.stop()
        cache.stop()


@pytest.fixture
def region() -> Iterator[Any]:
    """Make a fresh POSIX shared memory object; yields a factory (size -> (key, handle))."""
    made: list[Any] = []

    def make(size: int) -> tuple[str, Any]:
        key = f"/conch-e2e-{uuid.uuid4().hex[:10]}"
        made.append(shm.create_shared_memory_region(key.strip("/"), key, size))
        return key, made[-1]

    yield make
    for handle in made:
        shm.destroy_shared_memory_region(handle)


def simple_inputs(module: Any, a: np.ndarray, b: np.ndarray) -> list[Any]:
    inputs = []
    for name, value in (("INPUT0", a), ("INPUT1", b)):
        tensor = module.InferInput(name, list(value.shape), "INT32")
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)
    return inputs


# --- server metadata ------------------------------------------------------------------------


def test_server_reports_the_extensions(fleet: Fleet) -> None:
    assert fleet.http().get_server_metadata()["name"] == "conch"  # unless --server-name
    http = fleet.http().get_server_metadata()["extensions"]
    grpc = list(fleet.grpc().get_server_metadata().extensions)
    for name in (
        "system_shared_memory",
        "cuda_shared_memory",
        "classification",
        "trace",
        "logging",
    ):
        assert name in http and name in grpc


# --- shared memory --------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_shared_memory_gives_the_same_answers(fleet: Fleet, region: Any, protocol: str) -> None:
    module = httpclient if protocol == "http" else grpcclient
    client = fleet.http() if protocol == "http" else fleet.grpc()
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.full((2, 16), 3, dtype=np.int32)
    plain = client.infer("simple", simple_inputs(module, a, b))
    in_key, in_handle = region(256)
    out_key, out_handle = region(256)
    shm.set_shared_memory_region(in_handle, [a])
    shm.set_shared_memory_region(in_handle, [b], offset=128)
    name = uuid.uuid4().hex[:8]
    client.register_system_shared_memory(f"in-{name}", in_key, 256)
    client.register_system_shared_memory(f"out-{name}", out_key, 256)
    try:
        inputs = [module.InferInput(n, [2, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        inputs[0].set_shared_memory(f"in-{name}", 128)
        inputs[1].set_shared_memory(f"in-{name}", 128, offset=128)
        outputs = [module.InferRequestedOutput(n) for n in ("OUTPUT0", "OUTPUT1")]
        outputs[0].set_shared_memory(f"out-{name}", 128)
        outputs[1].set_shared_memory(f"out-{name}", 128, offset=128)
        client.infer("simple", inputs, outputs=outputs)
        total = shm.get_contents_as_numpy(out_handle, np.int32, [2, 16])
        difference = shm.get_contents_as_numpy(out_handle, np.int32, [2, 16], offset=128)
        np.testing.assert_array_equal(total, plain.as_numpy("OUTPUT0"))
        np.testing.assert_array_equal(difference, plain.as_numpy("OUTPUT1"))
    finally:
        client.unregister_system_shared_memory(f"in-{name}")
        client.unregister_system_shared_memory(f"out-{name}")


def test_bytes_tensors_through_shared_memory(fleet: Fleet, region: Any) -> None:
    from tritonclient import utils

    client = fleet.grpc()
    text = np.array([[str(i).encode() for i in range(16)]], dtype=np.object_)
    data = utils.serialize_byte_tensor(text)
    size = utils.serialized_byte_size(data)
    in_key, in_handle = region(size)
    out_key, out_handle = region(256)
    shm.set_shared_memory_region(in_handle, [data])
    client.register_system_shared_memory("text-in", in_key, size)
    client.register_system_shared_memory("text-out", out_key, 256)
    try:
        inputs = [grpcclient.InferInput(n, [1, 16], "BYTES") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_shared_memory("text-in", size)
        output = grpcclient.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory("text-out", 256)
        result = client.infer("simple_string", inputs, outputs=[output])
        assert result.get_response().raw_output_contents == [b""]  # the data is in the region
        found = shm.get_contents_as_numpy(out_handle, np.object_, [1, 16])
        assert [int(x) for x in found[0]] == [2 * i for i in range(16)]
    finally:
        client.unregister_system_shared_memory()


def test_region_unregistered_mid_use_is_a_clear_error(
    fleet: Fleet, region: Any, tmp_path: Path
) -> None:
    """The probe model enters execute (a file in the rendezvous directory says so), then sleeps;
    the output region is unregistered meanwhile: the request fails naming it."""
    client = fleet.http()
    out_key, out_handle = region(64)
    client.register_system_shared_memory("mid-use", out_key, 64)
    value = np.array([[21]], dtype=np.int64)
    tensor = httpclient.InferInput("INPUT0", [1, 1], "INT64")
    tensor.set_data_from_numpy(value)
    output = httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)
    output.set_shared_memory("mid-use", 8)
    inside = tmp_path / "inside"
    inside.mkdir()
    found: dict[str, Any] = {}

    def call() -> None:
        try:
            client_ = fleet.http()
            parameters = {"rendezvous": str(inside), "parties": 1, "probe_sleep_ms": 5000}
            found["result"] = client_.infer(
                "python_probe", [tensor], outputs=[output], parameters=parameters
            )
        except InferenceServerException as exc:
            found["error"] = exc

    thread = threading.Thread(target=call)
    thread.start()
    until_sync(lambda: any(inside.iterdir()), 30, every=0.01)  # the model is in execute
    client.unregister_system_shared_memory("mid-use")
    thread.join(30)
    assert "error" in found, found
    assert "'mid-use' was unregistered while the request was in flight" in found["error"].message()
    assert found["error"].status() == "400"
    assert shm.get_contents_as_numpy(out_handle, np.int64, [1]).tolist() == [0]


def test_shared_memory_status_and_cuda_over_grpc(fleet: Fleet, region: Any) -> None:
    client = fleet.grpc()
    key, _ = region(32)
    client.register_system_shared_memory("status-r", key, 16, offset=8)
    try:
        status = client.get_system_shared_memory_status("status-r", as_json=True)
        assert status["regions"]["status-r"] == {
            "name": "status-r",
            "key": key,
            "offset": "8",
            "byte_size": "16",
        }
        with pytest.raises(InferenceServerException, match="already in manager"):
            client.register_system_shared_memory("status-r", key, 16)
    finally:
        client.unregister_system_shared_memory("status-r")
    with pytest.raises(InferenceServerException, match="GPUs not supported"):
        client.register_cuda_shared_memory("cuda-r", b"\0" * 64, 0, 16)
    client.unregister_cuda_shared_memory()
    assert client.get_cuda_shared_memory_status(as_json=True) == {}


# --- classification -------------------------------------------------------------------------


def test_classification_over_http_and_grpc(fleet: Fleet) -> None:
    x = np.random.default_rng(3).standard_normal((2, 256)).astype(np.float32)
    plain_in = httpclient.InferInput("INPUT0", [2, 256], "FP32")
    plain_in.set_data_from_numpy(x)
    scores = fleet.http().infer("mlp", [plain_in]).as_numpy("OUTPUT0")
    expected = [
        [f"{scores[row, i]:f}:{i}:class_{i:02d}" for i in np.argsort(-scores[row])[:3]]
        for row in range(2)
    ]
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=False, class_count=3)
    result = fleet.http().infer("mlp", [plain_in], outputs=[out])
    assert result.as_numpy("OUTPUT0").tolist() == expected  # JSON: strings
    grpc_in = grpcclient.InferInput("INPUT0", [2, 256], "FP32")
    grpc_in.set_data_from_numpy(x)
    out = grpcclient.InferRequestedOutput("OUTPUT0", class_count=3)
    found = fleet.grpc().infer("mlp", [grpc_in], outputs=[out]).as_numpy("OUTPUT0")
    assert [[item.decode() for item in row] for row in found] == expected


# --- response cache -------------------------------------------------------------------------


def cache_stats(fleet: Fleet) -> dict[str, Any]:
    found = fleet.http().get_inference_statistics("mlp_cached")["model_stats"][0]
    return {**found["inference_stats"], "inference_count": found["inference_count"]}


def gateway_counter(gateway: str, name: str) -> float:
    text = httpx.get(f"http://{gateway}/metrics").text
    for line in text.splitlines():
        if line.startswith(f'{name}{{model="mlp_cached"'):
            return float(line.split()[-1])
    return 0.0


def mlp_input(module: Any, seed: int) -> list[Any]:
    x = np.random.default_rng(seed).standard_normal((1, 256)).astype(np.float32)
    tensor = module.InferInput("INPUT0", [1, 256], "FP32")
    tensor.set_data_from_numpy(x)
    return [tensor]


def test_a_repeated_request_hits_on_every_gateway(fleet: Fleet) -> None:
    """The first request misses (on the first gateway); the same request is then a hit on each
    of the three, never reaching a worker again."""
    before = cache_stats(fleet)
    first = fleet.http(0).infer("mlp_cached", mlp_input(httpclient, 11)).as_numpy("OUTPUT0")
    for index in range(3):
        again = fleet.http(index).infer("mlp_cached", mlp_input(httpclient, 11))
        np.testing.assert_array_equal(again.as_numpy("OUTPUT0"), first)
    grpc = fleet.grpc().infer("mlp_cached", mlp_input(grpcclient, 11)).as_numpy("OUTPUT0")
    np.testing.assert_array_equal(grpc, first)
    assert gateway_counter(fleet.gateways[1], "nv_cache_num_hits_per_model") >= 1
    assert gateway_counter(fleet.gateways[2], "nv_cache_num_hits_per_model") >= 1
    assert gateway_counter(fleet.gateways[1], "nv_cache_num_misses_per_model") == 0
    after = eventually_sync(  # statistics are flushed to Redis once a second
        lambda: cache_stats(fleet),
        lambda now: now["cache_hit"]["count"] - before["cache_hit"]["count"] >= 4,
        10,
        every=0.2,
    )
    assert after["cache_hit"]["count"] - before["cache_hit"]["count"] == 4
    assert after["cache_miss"]["count"] - before["cache_miss"]["count"] == 1
    assert after["inference_count"] - before["inference_count"] == 1  # executed once
    assert after["success"]["count"] - before["success"]["count"] == 5


def test_uncached_model_and_other_inputs_are_not_hits(fleet: Fleet) -> None:
    before = cache_stats(fleet)
    fleet.http().infer("mlp_cached", mlp_input(httpclient, 12))
    fleet.http().infer("mlp", mlp_input(httpclient, 12))
    fleet.http().infer("mlp", mlp_input(httpclient, 12))
    after = eventually_sync(  # statistics are flushed to Redis once a second
        lambda: cache_stats(fleet),
        lambda now: now["cache_miss"]["count"] > before["cache_miss"]["count"],
        10,
        every=0.2,
    )
    assert after["cache_miss"]["count"] == before["cache_miss"]["count"] + 1
    assert after["cache_hit"]["count"] == before["cache_hit"]["count"]


# --- trace and logging ----------------------------------------------------------------------


def test_trace_settings_per_model_over_both_protocols(fleet: Fleet) -> None:
    http = fleet.http()
    assert http.get_trace_settings()["trace_mode"] == "opentelemetry"
    http.update_trace_settings(settings={"trace_rate": "50"})
    found = http.update_trace_settings("simple", settings={"trace_level": ["TIMESTAMPS"]})
    assert found["trace_level"] == ["TIMESTAMPS"] and found["trace_rate"] == "50"
    grpc = fleet.grpc().get_trace_settings("simple", as_json=True)["settings"]
    assert grpc["trace_level"]["value"] == ["TIMESTAMPS"] and grpc["trace_rate"]["value"] == ["50"]
    cleared = fleet.grpc().update_trace_settings("simple", {"trace_level": None}, as_json=True)
    assert cleared["settings"]["trace_level"]["value"] == ["OFF"]
    with pytest.raises(InferenceServerException, match="trace file location can not be updated"):
        http.update_trace_settings(settings={"trace_file": "/tmp/trace"})
    with pytest.raises(InferenceServerException, match="Request for unknown model : nope"):
        http.get_trace_settings("nope")


def test_log_settings_reach_every_service(fleet: Fleet) -> None:
    http = fleet.http()
    assert http.update_log_settings({"log_verbose_level": 1})["log_verbose_level"] == 1
    assert fleet.mesh.log_dir is not None

    def changed(service: str) -> bool:
        text = (fleet.mesh.log_dir / f"{service}.log").read_text(errors="replace")
        return "log level changed" in text and "DEBUG" in text

    for service in ("worker", "python-worker", "scheduler"):
        assert until_sync(functools.partial(changed, service), 30, every=0.1), service
    grpc = fleet.grpc().update_log_settings({"log_verbose_level": 0}, as_json=True)
    assert grpc["settings"]["log_verbose_level"]["uint32_param"] == 0
    with pytest.raises(InferenceServerException, match="log file location"):
        http.update_log_settings({"log_file": "/tmp/log"})


# --- repository -----------------------------------------------------------------------------


def test_reload_with_a_config_override_serves_throughout(fleet: Fleet) -> None:
    """Triton's model control example: a config override reloads the loaded version; requests
    sent meanwhile are all answered."""
    client = fleet.http()
    failures: list[str] = []
    answered = 0
    stop = threading.Event()

    def traffic() -> None:
        nonlocal answered
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        own = fleet.http()
        while not stop.is_set():
            try:
                result = own.infer("simple", simple_inputs(httpclient, a, a))
                assert result.as_numpy("OUTPUT0").tolist() == (a * 2).tolist()
                answered += 1
            except Exception as exc:
                failures.append(str(exc))

    thread = threading.Thread(target=traffic)
    thread.start()
    try:
        time.sleep(0.3)
        with pytest.raises(InferenceServerException, match="failed to load"):
            client.load_model("simple", config='"parameters": {"config": {{"max_batch_size"')
        client.load_model("simple", config='{"max_batch_size":"16"}')
        assert client.get_model_config("simple")["max_batch_size"] == 16
        client.load_model("simple")  # the override ends: config.pbtxt again
        assert client.get_model_config("simple")["max_batch_size"] == 8
        time.sleep(0.3)
    finally:
        stop.set()
        thread.join(30)
    assert failures == [] and answered > 0


def test_uploaded_model_files_load_on_every_worker(fleet: Fleet, repository: Path) -> None:
    client = fleet.grpc()
    model_bytes = (repository / "simple" / "1" / "model.onnx").read_bytes()
    config = {
        "name": "uploaded",
        "platform": "onnxruntime_onnx",
        "max_batch_size": 8,
        "input": [
            {"name": n, "data_type": "TYPE_INT32", "dims": [16]} for n in ("INPUT0", "INPUT1")
        ],
        "output": [
            {"name": n, "data_type": "TYPE_INT32", "dims": [16]} for n in ("OUTPUT0", "OUTPUT1")
        ],
    }
    client.load_model(
        "uploaded", config=json.dumps(config), files={"file:1/model.onnx": model_bytes}
    )
    assert (repository / "uploaded" / "1" / "model.onnx").read_bytes() == model_bytes
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    result = fleet.http().infer("uploaded", simple_inputs(httpclient, a, a))
    assert result.as_numpy("OUTPUT1").tolist() == [[0] * 16]
    ready = [
        m
        for m in client.get_model_repository_index(as_json=True)["models"]
        if m["name"] == "uploaded"
    ]
    assert ready == [{"name": "uploaded", "version": "1", "state": "READY"}]


def test_upload_paths_are_confined(fleet: Fleet) -> None:
    grpc = fleet.grpc()
    with pytest.raises(InferenceServerException) as caught:
        grpc.load_model("simple", config="{}", files={"file:" + "A" * 256: b"a"})
    assert caught.value.status() == "StatusCode.INTERNAL"
    assert "failed to poll from model repository" in caught.value.message()
    body = {"parameters": {"file:../../escape.txt": base64.b64encode(b"x").decode()}}
    answer = httpx.post(f"http://{fleet.mesh.url}/v2/repository/models/simple/load", json=body)
    assert (
        answer.status_code == 400 and "must stay within model directory" in answer.json()["error"]
    )
    assert grpc.is_server_live()


def test_repository_index_ready_only(fleet: Fleet) -> None:
    everything = fleet.http().get_model_repository_index()
    assert {"name": "simple", "version": "1", "state": "READY"} in everything
    answer = httpx.post(f"http://{fleet.mesh.url}/v2/repository/index", json={"ready": True})
    assert all(entry["state"] == "READY" for entry in answer.json())


# --- header forwarding, custom metrics, auto-complete, Triton's texts ------------------------


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_matching_headers_reach_the_model_as_parameters(fleet: Fleet, protocol: str) -> None:
    module = httpclient if protocol == "http" else grpcclient
    client = fleet.http() if protocol == "http" else fleet.grpc()
    tensor = module.InferInput("INPUT0", [1, 1], "INT64")
    tensor.set_data_from_numpy(np.array([[10]], dtype=np.int64))
    result = client.infer("python_probe", [tensor], headers={"probe_add": "5", "other_add": "7"})
    assert result.as_numpy("OUTPUT0").tolist() == [[25]]


def test_python_model_metrics_in_the_workers_metrics(fleet: Fleet) -> None:
    text = np.array([[str(i).encode() for i in range(16)]], dtype=np.object_)
    inputs = [httpclient.InferInput(n, [1, 16], "BYTES") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(text)
    fleet.http().infer("simple_string", inputs)
    exposition = httpx.get(f"http://127.0.0.1:{fleet.python_worker_port}/metrics").text
    assert "# TYPE simple_string_requests counter" in exposition
    assert 'simple_string_requests{model="simple_string",version="1"}' in exposition
    assert "simple_string_elements_bucket" in exposition


def test_auto_completed_python_model_metadata(fleet: Fleet) -> None:
    metadata = fleet.http().get_model_metadata("simple_identity")
    assert metadata["inputs"] == [{"name": "INPUT0", "datatype": "BYTES", "shape": [-1, -1]}]


def test_tritons_error_texts(fleet: Fleet) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    with pytest.raises(InferenceServerException) as caught:
        fleet.grpc().infer("simple", simple_inputs(grpcclient, a, a), model_version="wrong")
    assert (
        "failed to get model version from specified version string 'wrong'"
        in caught.value.message()
    )
    with pytest.raises(InferenceServerException, match="Request for unknown model"):
        fleet.http().get_model_metadata("wrong_model_name")
    with pytest.raises(InferenceServerException, match="failed to load 'wrong_model_name'"):
        fleet.http().load_model("wrong_model_name")


# --- last: the cache Redis goes away ---------------------------------------------------------


def test_cache_unavailable_serves_uncached(fleet: Fleet) -> None:
    fleet.cache.stop()
    for seed in (21, 21, 22):
        result = fleet.http().infer("mlp_cached", mlp_input(httpclient, seed))
        assert result.as_numpy("OUTPUT0").shape == (1, 16)


# --- the new endpoints in the OpenAPI schema; bad input is a 4xx -----------------------------


def test_new_endpoints_are_documented_and_refuse_bad_input_with_4xx(fleet: Fleet) -> None:
    base = f"http://{fleet.mesh.url}"
    paths = httpx.get(f"{base}/schema/openapi.json").json()["paths"]
    for path in (
        "/v2/systemsharedmemory/status",
        "/v2/systemsharedmemory/region/{name}/register",
        "/v2/systemsharedmemory/region/{name}/unregister",
        "/v2/cudasharedmemory/region/{name}/register",
        "/v2/trace/setting",
        "/v2/models/{model}/trace/setting",
        "/v2/logging",
        "/v2/repository/models/{model}/load",
    ):
        assert path in paths, path
    register = paths["/v2/systemsharedmemory/region/{name}/register"]["post"]
    assert "requestBody" in register
    bad = [
        ("/v2/systemsharedmemory/region/r/register", {"key": 5, "byte_size": 1}),
        ("/v2/systemsharedmemory/region/r/register", {"key": "/k", "byte_size": -1}),
        ("/v2/systemsharedmemory/region/r/register", {"key": "/nope", "byte_size": 8}),
        ("/v2/cudasharedmemory/region/r/register", {"raw_handle": {"b64": "!!"}, "byte_size": 1}),
        ("/v2/trace/setting", {"trace_rate": 7}),
        ("/v2/trace/setting", {"trace_level": ["LOUD"]}),
        ("/v2/logging", {"log_info": "yes"}),
        ("/v2/logging", {"log_verbose_level": -3}),
        ("/v2/repository/models/simple/load", {"parameters": []}),
        ("/v2/repository/models/simple/unload", {"parameters": {"unload_dependents": "x"}}),
        ("/v2/repository/index", {"ready": "maybe"}),
    ]
    for path, body in bad:
        answer = httpx.post(f"{base}{path}", json=body)
        assert 400 <= answer.status_code < 500, (path, body, answer.status_code, answer.text)
        assert "error" in answer.json()
    infer = {
        "inputs": [{"name": "INPUT0", "shape": [1, 256], "datatype": "FP32", "data": [0.0] * 256}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"classification": "x"}}],
    }
    answer = httpx.post(f"{base}/v2/models/mlp/infer", json=infer)
    assert answer.status_code == 400 and "classification" in answer.json()["error"]
