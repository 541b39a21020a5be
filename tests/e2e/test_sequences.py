"""Sequences across a mesh of real processes: two gateways (REST, and gRPC on one of them), two
schedulers, two ONNX Runtime workers and a Python worker, with tritonclient as the client.

What a Triton user depends on: NVIDIA's sequence client examples get the answers they check;
interleaved sequences sent round-robin through both gateways get exactly their running sums;
Triton's errors for every misuse; idle sequences are released; a worker SIGKILLed while holding
live sequences costs them nothing (they continue on the other worker from the committed state).
The kill test runs last: it takes a worker away from the module's mesh.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
import redis
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from conch.ports import free_port
from conch.private_redis import PrivateRedis
from shared.wire import keys
from tests.mesh import Mesh, flush_database, sync_redis
from tests.waiting import eventually_sync

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
IDLE_MODEL = "sequence_accumulator_idle"
IDLE_US = 400_000
FAST = {  # adoption within seconds of a death, not the production default
    "CONCH_WORKER_DEAD_BOUND_MS": "3500",
    "CONCH_WORKER_RECLAIM_INTERVAL_MS": "300",
    "CONCH_WORKER_SEQUENCE_RECONCILE_MS": "200",
}


def write_repository(repo: Path) -> None:
    onnx_models = ["simple", "simple_sequence", "simple_dyna_sequence", "sequence_accumulator"]
    python_models = ["sequence_accumulator_py", "simple_string_dyna_sequence"]
    for script, names in (
        ("make_models.py", onnx_models),
        ("make_backend_models.py", python_models),
    ):
        argv = [sys.executable, str(ROOT / "examples" / script), str(repo)]
        for name in names:
            argv += ["--model", name]
        subprocess.run(argv, check=True, capture_output=True)
    shutil.copytree(repo / "sequence_accumulator", repo / IDLE_MODEL)
    config = (repo / IDLE_MODEL / "config.pbtxt").read_text()
    config = config.replace('"sequence_accumulator"', f'"{IDLE_MODEL}"')
    config = config.replace("10000000", str(IDLE_US))
    (repo / IDLE_MODEL / "config.pbtxt").write_text(config)


@dataclass
class SequenceMesh:
    mesh: Mesh
    http: list[str]
    grpc: str
    redis_url: str
    # /metrics of the two ONNX Runtime workers
    worker_metrics: list[str]


@pytest.fixture(scope="module")
def seq_mesh(
    redis_server: PrivateRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SequenceMesh]:
    repo = tmp_path_factory.mktemp("sequence_repo")
    write_repository(repo)
    flush_database(redis_server.url)
    mesh = Mesh(redis_server.url, repo, log_dir=tmp_path_factory.mktemp("logs"))
    second, grpc_port, health = free_port(), free_port(), [free_port(), free_port()]
    try:
        mesh.start_scheduler("scheduler-a")
        mesh.start_scheduler("scheduler-b")
        for name, port in zip(("worker-a", "worker-b"), health, strict=True):
            mesh.start_worker(name, CONCH_WORKER_HEALTH_PORT=str(port), **FAST)
        mesh.start_worker("worker-py", backend="python", **FAST)
        mesh.start_gateway(processes=1, name="gateway-a", CONCH_GATEWAY_GRPC_PORT=str(grpc_port))
        mesh.start_gateway(processes=1, name="gateway-b", CONCH_GATEWAY_HTTP_PORT=str(second))
        mesh.wait_ready(["simple_sequence", "sequence_accumulator", "simple_string_dyna_sequence"])
        yield SequenceMesh(
            mesh,
            [mesh.url, f"localhost:{second}"],
            f"localhost:{grpc_port}",
            redis_server.url,
            [f"http://127.0.0.1:{port}/metrics" for port in health],
        )
    finally:
        mesh.stop()


def http_step(
    client: httpclient.InferenceServerClient,
    model: str,
    seq: int | str,
    value: int,
    start: bool = False,
    end: bool = False,
    batch: int = 1,
) -> int:
    data = np.full((batch, 1), value, np.int32)
    tensor = httpclient.InferInput("INPUT", list(data.shape), "INT32")
    tensor.set_data_from_numpy(data)
    result = client.infer(model, [tensor], sequence_id=seq, sequence_start=start, sequence_end=end)
    return int(result.as_numpy("OUTPUT")[0][0])


def grpc_step(
    client: grpcclient.InferenceServerClient,
    model: str,
    seq: int | str,
    value: int,
    start: bool = False,
    end: bool = False,
) -> int:
    data = np.full((1, 1), value, np.int32)
    tensor = grpcclient.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(data)
    result = client.infer(model, [tensor], sequence_id=seq, sequence_start=start, sequence_end=end)
    return int(result.as_numpy("OUTPUT")[0][0])


# --- NVIDIA's client examples --------------------------------------------------------------------

VALUES = [11, 7, 5, 3, 2, 0, 1]


def run_examples_sequence(  # type: ignore[no-untyped-def]
    step, model: str, seq: int | str, first: int, sign: int
) -> list[int]:
    inputs = [first] + [sign * v for v in VALUES]
    return [
        step(model, seq, v, start=i == 0, end=i == len(inputs) - 1) for i, v in enumerate(inputs)
    ]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_what_nvidias_sequence_client_examples_check(seq_mesh: SequenceMesh, protocol: str) -> None:
    """simple_{http,grpc}_sequence_sync_infer_client.py, with and without ``-d``."""
    if protocol == "http":
        client = httpclient.InferenceServerClient(seq_mesh.http[0])

        def step(model: str, seq: int | str, v: int, start: bool, end: bool) -> int:
            return http_step(client, model, seq, v, start, end)
    else:
        gclient = grpcclient.InferenceServerClient(seq_mesh.grpc)

        def step(model: str, seq: int | str, v: int, start: bool, end: bool) -> int:
            return grpc_step(gclient, model, seq, v, start, end)

    offset = 0 if protocol == "http" else 10
    # simple_sequence: (INPUT + START) * READY, uint64 and uuid ids.
    out0 = run_examples_sequence(step, "simple_sequence", 1000 + offset, 0, 1)
    out1 = run_examples_sequence(step, "simple_sequence", 1001 + offset, 100, -1)
    out2 = run_examples_sequence(step, "simple_sequence", str(uuid.uuid4()), 20, -1)
    assert out0 == [1, *VALUES]
    assert out1 == [101, *(-v for v in VALUES)]
    assert out2 == [21, *(-v for v in VALUES)]
    # -d: simple_dyna_sequence adds the id at END; simple_string_dyna_sequence accumulates.
    ids = (1000 + offset, 1001 + offset, str(1002 + offset))
    dyna0 = run_examples_sequence(step, "simple_dyna_sequence", ids[0], 0, 1)
    dyna1 = run_examples_sequence(step, "simple_dyna_sequence", ids[1], 100, -1)
    text = run_examples_sequence(step, "simple_string_dyna_sequence", ids[2], 20, -1)
    assert dyna0 == [1, *VALUES[:-1], VALUES[-1] + ids[0]]
    assert dyna1 == [101, *(-v for v in VALUES[:-1]), -VALUES[-1] + ids[1]]
    running = list(np.cumsum([20] + [-v for v in VALUES]))
    running[-1] += int(ids[2])
    assert text == running


# --- interleaved sequences over every replica -------------------------------------------------


def run_sequences(
    urls: list[str],
    model: str,
    ids: list[int | str],
    steps: int,
    reached: threading.Barrier | None = None,
    at_step: int = 0,
) -> tuple[dict[int | str, list[int]], dict[int | str, list[int]], list[BaseException]]:
    """Each sequence in its own thread, its steps alternating over the gateways."""
    rng = np.random.default_rng(11)
    values = {seq: [int(v) for v in rng.integers(-50, 50, steps)] for seq in ids}
    outputs: dict[int | str, list[int]] = {seq: [] for seq in ids}
    errors: list[BaseException] = []

    def run(index: int, seq: int | str) -> None:
        clients = [httpclient.InferenceServerClient(url, network_timeout=60) for url in urls]
        try:
            for k, value in enumerate(values[seq]):
                client = clients[(k + index) % len(clients)]
                outputs[seq].append(
                    http_step(client, model, seq, value, start=k == 0, end=k == steps - 1)
                )
                if reached is not None and k == at_step:
                    reached.wait(timeout=60)
        except BaseException as exc:  # reported by the test
            errors.append(exc)
            if reached is not None:
                reached.abort()

    threads = [threading.Thread(target=run, args=(i, seq)) for i, seq in enumerate(ids)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=150)
    return values, outputs, errors


IDS: list[int | str] = [101, 102, 103, 104, "alpha", "beta", "gamma", "delta"]


def test_interleaved_sequences_over_two_gateways_get_exact_running_sums(
    seq_mesh: SequenceMesh,
) -> None:
    values, outputs, errors = run_sequences(seq_mesh.http, "sequence_accumulator", IDS, 12)
    assert errors == []
    for seq in IDS:
        assert outputs[seq] == [int(x) for x in np.cumsum(values[seq])], seq
    # Both workers held sequences; every sequence ended and left nothing behind.
    r = sync_redis(seq_mesh.redis_url)
    slots = r.hgetall(keys.sequence_slots("sequence_accumulator", 1))
    assert len(slots) == 2
    assert r.zcard(keys.sequence_backlog("sequence_accumulator", 1)) == 0
    for seq in IDS:
        name = f"s:{seq}" if isinstance(seq, str) else f"u:{seq}"
        assert not r.exists(keys.sequence_binding("sequence_accumulator", 1, name))


def test_the_python_accumulator_and_its_sequence_api(seq_mesh: SequenceMesh) -> None:
    client = httpclient.InferenceServerClient(seq_mesh.http[1])
    for seq in (77, "py-seq"):
        sums, total = [], 0
        for k, value in enumerate([4, -1, 10, 6]):
            total += value
            data = np.full((1, 1), value, np.int32)
            tensor = httpclient.InferInput("INPUT", [1, 1], "INT32")
            tensor.set_data_from_numpy(data)
            result = client.infer(
                "sequence_accumulator_py", [tensor], sequence_id=seq, sequence_start=k == 0,
                sequence_end=k == 3,
            )  # fmt: skip
            sums.append(int(result.as_numpy("OUTPUT")[0][0]))
            assert result.as_numpy("CORRID_SEEN")[0][0] == str(seq).encode()
        assert sums == [4, 3, 13, 19]


# --- Triton's errors ----------------------------------------------------------------------------


def http_error(call) -> InferenceServerException:  # type: ignore[no-untyped-def]
    with pytest.raises(InferenceServerException) as info:
        call()
    return info.value


def test_tritons_errors_over_http(seq_mesh: SequenceMesh) -> None:
    client = httpclient.InferenceServerClient(seq_mesh.http[0])
    error = http_error(lambda: http_step(client, "sequence_accumulator", 555, 1))
    assert error.status() == "400"
    assert error.message() == (
        "inference request for sequence 555 to model 'sequence_accumulator' must specify the "
        "START flag on the first request of the sequence"
    )
    error = http_error(lambda: http_step(client, "simple_dyna_sequence", "text", 1, start=True))
    assert "sequence batching control 'CORRID' data-type is 'BYTES', but model " in error.message()
    assert "'simple_dyna_sequence' expects 'UINT64'" in error.message()
    error = http_error(lambda: http_step(client, "simple_string_dyna_sequence", 9, 1, start=True))
    assert "data-type is 'UINT64', but model 'simple_string_dyna_sequence' expects 'BYTES'" in (
        error.message()
    )
    error = http_error(lambda: http_step(client, "sequence_accumulator", 8, 1, True, batch=2))
    assert error.message() == (
        "inference request to model 'sequence_accumulator' must specify batch-size 1 due to "
        "requirements of sequence batcher"
    )
    body = {
        "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [1]}],
        "parameters": {"sequence_start": True},
    }
    url = f"http://{seq_mesh.http[0]}/v2/models/sequence_accumulator/infer"
    answer = httpx.post(url, json=body)
    assert answer.status_code == 400
    assert answer.json()["error"] == (
        "inference request to model 'sequence_accumulator' must specify a non-zero or non-empty "
        "correlation ID"
    )
    for name, value in (("sequence_id", -3), ("sequence_start", "yes"), ("sequence_end", 1)):
        answer = httpx.post(url, json={**body, "parameters": {"sequence_id": 4, name: value}})
        assert (answer.status_code, answer.json()["error"]) == (400, f"Unable to parse '{name}'")
    answer = httpx.post(url, json={**body, "parameters": {"sequence_id": "x" * 129}})
    assert answer.status_code == 501
    assert answer.json()["error"] == "string correlation ID cannot be longer than 128 characters"


def test_tritons_errors_over_grpc(seq_mesh: SequenceMesh) -> None:
    client = grpcclient.InferenceServerClient(seq_mesh.grpc)
    error = http_error(lambda: grpc_step(client, "sequence_accumulator", 556, 1))
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert "must specify the START flag on the first request of the sequence" in error.message()
    data = np.full((1, 1), 1, np.int32)
    tensor = grpcclient.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(data)
    request = service_pb2.ModelInferRequest(model_name="sequence_accumulator")
    request.inputs.extend([tensor._get_tensor()])
    request.raw_input_contents.append(data.tobytes())
    request.parameters["sequence_id"].uint64_param = 5
    with grpc.insecure_channel(seq_mesh.grpc) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelInfer(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == (
        "invalid value type for 'sequence_id' parameter, expected int64_param or string_param."
    )


def test_a_model_without_sequence_batching_ignores_sequence_parameters(
    seq_mesh: SequenceMesh,
) -> None:
    """As Triton: the default and dynamic batchers do not look at a correlation id."""
    client = httpclient.InferenceServerClient(seq_mesh.http[0])
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = httpclient.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(np.ones((1, 16), np.int32))
        inputs.append(tensor)
    result = client.infer("simple", inputs, sequence_id=12, sequence_start=True)
    assert result.as_numpy("OUTPUT0").tolist() == [[2] * 16]


def test_an_idle_sequence_is_released_and_must_start_again(seq_mesh: SequenceMesh) -> None:
    client = httpclient.InferenceServerClient(seq_mesh.http[0])
    assert http_step(client, IDLE_MODEL, 31, 5, start=True) == 5
    assert http_step(client, IDLE_MODEL, 31, 2) == 7
    time.sleep(IDLE_US / 1e6 + 0.3)
    error = http_error(lambda: http_step(client, IDLE_MODEL, 31, 1))
    assert "sequence 31 to model 'sequence_accumulator_idle' must specify the START flag" in (
        error.message()
    )
    assert http_step(client, IDLE_MODEL, 31, 4, start=True) == 4  # a new sequence


def test_server_metadata_advertises_string_sequence_ids(seq_mesh: SequenceMesh) -> None:
    extensions = httpx.get(f"http://{seq_mesh.http[0]}/v2").json()["extensions"]
    assert "sequence" in extensions and "sequence(string_id)" in extensions
    metadata = grpcclient.InferenceServerClient(seq_mesh.grpc).get_server_metadata()
    assert "sequence(string_id)" in metadata.extensions


def test_statistics_count_sequence_steps(seq_mesh: SequenceMesh) -> None:
    client = httpclient.InferenceServerClient(seq_mesh.http[1])
    before = client.get_inference_statistics("simple_sequence")["model_stats"][0]
    run_examples_sequence(
        lambda m, s, v, start, end: http_step(client, m, s, v, start, end),
        "simple_sequence", 4242, 0, 1,
    )  # fmt: skip
    after = client.get_inference_statistics("simple_sequence")["model_stats"][0]
    steps = len(VALUES) + 1
    assert after["inference_count"] - before["inference_count"] == steps
    success = after["inference_stats"]["success"]["count"]
    assert success - before["inference_stats"]["success"]["count"] == steps
    for phase in ("compute_input", "compute_output"):  # measured for every step (issue 28)
        grew = after["inference_stats"][phase]["ns"] - before["inference_stats"][phase]["ns"]
        assert grew > 0, phase
    answered = [s["response_stats"].get("0", {}).get("success", {}) for s in (before, after)]
    assert answered[1]["count"] - answered[0].get("count", 0) == steps


def sequence_metrics(seq_mesh: SequenceMesh, model: str) -> dict[str, float]:
    """Sums over both workers of each sequence family (and event) for one model."""
    from prometheus_client.parser import text_string_to_metric_families

    totals: dict[str, float] = {}
    for url in seq_mesh.worker_metrics:
        for family in text_string_to_metric_families(httpx.get(url, timeout=5).text):
            for sample in family.samples:
                if sample.labels.get("model") != model or "sequence" not in sample.name:
                    continue
                name = sample.name + (
                    f":{sample.labels['event']}" if "event" in sample.labels else ""
                )
                totals[name] = totals.get(name, 0.0) + sample.value
    return totals


def _raw_step(address: str, seq: int, value: int, parameters: dict) -> socket.socket:
    """One step of sequence_accumulator_py on a raw socket (closing it cancels the request)."""
    body = json.dumps(
        {
            "parameters": {"sequence_id": seq, **parameters},
            "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [value]}],
        }
    ).encode()
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.sendall(
        b"POST /v2/models/sequence_accumulator_py/infer HTTP/1.1\r\nHost: x\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    return sock


def test_cancelling_a_request_of_a_sequence_ends_the_sequence(seq_mesh: SequenceMesh) -> None:
    """Step 2 runs (held 1.5 s by the model), step 3 waits behind it and its client goes away:
    step 3 never runs, is counted once as cancelled, and the sequence is over: a next request
    without START is refused with Triton's error, and a START begins again from zero."""
    model, seq = "sequence_accumulator_py", 7001
    client = httpclient.InferenceServerClient(seq_mesh.http[0])
    stats = lambda: client.get_inference_statistics(model)["model_stats"][0]["inference_stats"]  # noqa: E731
    before = stats()["cancel"]["count"]

    def step(value: int, start: bool = False) -> int:
        tensor = httpclient.InferInput("INPUT", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.full((1, 1), value, np.int32))
        result = client.infer(model, [tensor], sequence_id=seq, sequence_start=start)
        return int(result.as_numpy("OUTPUT")[0][0])

    assert step(1, start=True) == 1
    running = _raw_step(seq_mesh.http[0], seq, 2, {"delay_ms": 1500})
    time.sleep(0.3)
    queued = _raw_step(seq_mesh.http[0], seq, 4, {})
    time.sleep(0.3)
    queued.close()  # the client of step 3 goes away while it waits behind step 2
    running.settimeout(20)
    answer = b""
    while b'"data":[3]' not in answer:  # step 2 ran: 1 + 2
        chunk = running.recv(65536)
        assert chunk, answer
        answer += chunk
    running.close()
    cancelled = eventually_sync(lambda: stats()["cancel"]["count"], lambda n: n != before, 10, 0.1)
    assert cancelled == before + 1
    with pytest.raises(InferenceServerException) as refused:
        step(8)
    assert (
        f"inference request for sequence {seq} to model '{model}' must specify the START flag"
        in refused.value.message()
    )
    assert step(5, start=True) == 5  # a new sequence: step 3's 4 was never added


def test_cancelling_a_running_step_ends_the_sequence_after_it(seq_mesh: SequenceMesh) -> None:
    """Step 2's client goes away while the model runs it: the step finishes, then the sequence
    is released; the next request without START is refused."""
    model, seq = "sequence_accumulator_py", 7002
    client = httpclient.InferenceServerClient(seq_mesh.http[0])

    def step(value: int, start: bool = False) -> int:
        tensor = httpclient.InferInput("INPUT", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.full((1, 1), value, np.int32))
        result = client.infer(model, [tensor], sequence_id=seq, sequence_start=start)
        return int(result.as_numpy("OUTPUT")[0][0])

    assert step(1, start=True) == 1
    running = _raw_step(seq_mesh.http[0], seq, 2, {"delay_ms": 1000})
    time.sleep(0.4)
    running.close()  # cancelled while it runs
    time.sleep(1.5)  # the step has finished and the sequence was released
    with pytest.raises(InferenceServerException) as refused:
        step(8)
    assert "must specify the START flag" in refused.value.message()


def test_workers_export_active_sequences_slots_and_events(seq_mesh: SequenceMesh) -> None:
    client = httpclient.InferenceServerClient(seq_mesh.http[0])
    for seq in (901, 902, 903):
        http_step(client, "sequence_accumulator", seq, 1, start=True)
    totals = eventually_sync(  # holders publish occupancy on their reconcile ticks
        lambda: sequence_metrics(seq_mesh, "sequence_accumulator"),
        lambda found: found.get("conch_sequences_active", 0) >= 3,
        10,
        every=0.2,
    )
    assert totals["conch_sequences_active"] >= 3
    assert totals["conch_sequence_slots"] == 16  # two instances of max_batch_size 8
    assert totals["conch_sequence_backlog"] == 0
    assert totals["conch_sequence_events_total:state_committed"] >= 3
    for seq in (901, 902, 903):
        http_step(client, "sequence_accumulator", seq, 1, end=True)
    ended = sequence_metrics(seq_mesh, "sequence_accumulator")["conch_sequence_events_total:ended"]
    assert ended >= 3


# --- a holder dies ------------------------------------------------------------------------------


def holders(r: redis.Redis, model: str) -> dict[str, int]:
    """Worker id -> sequences its instances hold now."""
    out: dict[str, int] = {}
    for instance in r.hgetall(keys.sequence_slots(model, 1)):
        name = instance.decode()
        held = r.zcard(keys.sequence_held(model, 1, name))
        worker = name.rsplit("#", 1)[0]
        out[worker] = out.get(worker, 0) + held
    return out


def worker_process(r: redis.Redis, mesh: Mesh, worker_id: str) -> str:
    pid = int(r.hget(keys.service_info("worker", worker_id), "pid") or 0)
    for name, process in mesh.processes.items():
        if process.pid == pid:
            return name
    raise AssertionError(f"no process of the mesh is worker {worker_id} (pid {pid})")


def test_sigkill_of_the_worker_holding_live_sequences_loses_no_step(
    seq_mesh: SequenceMesh,
) -> None:
    steps, kill_after = 16, 5
    r = sync_redis(seq_mesh.redis_url)
    reached = threading.Barrier(len(IDS) + 1)
    result: dict[str, object] = {}

    def drive() -> None:
        result["run"] = run_sequences(
            seq_mesh.http, "sequence_accumulator", IDS, steps, reached, kill_after
        )

    driver = threading.Thread(target=drive)
    driver.start()
    reached.wait(timeout=120)  # every sequence has done kill_after + 1 steps and goes on
    held = holders(r, "sequence_accumulator")
    victim = max(held, key=lambda w: held[w])
    assert held[victim] >= 4, held
    seq_mesh.mesh.kill(worker_process(r, seq_mesh.mesh, victim))
    driver.join(timeout=180)
    values, outputs, errors = result["run"]  # type: ignore[misc]
    assert errors == []
    for seq in IDS:
        assert outputs[seq] == [int(x) for x in np.cumsum(values[seq])], seq
    assert victim not in holders(r, "sequence_accumulator")
