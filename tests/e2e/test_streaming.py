"""Decoupled models and streaming through a real mesh: gRPC ModelStreamInfer, generate and
generate_stream (SSE), streaming /infer, and cancellation (queued, running, disconnect).

Models (``examples/make_backend_models.py``): ``square_int32`` (Triton's decoupled example:
IN = n gives n responses from a thread of the model), ``repeat_int32`` (IN, DELAY, WAIT: one
response per element; logs when it sees ``is_cancelled()``) and ``chaos_recorder`` (an ordinary
model that records each execution, and holds while a file exists). The last test kills the
worker mid-stream, so it runs last.
"""

from __future__ import annotations

import contextlib
import json
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from conch.ports import free_port
from conch.private_redis import PrivateRedis
from tests.mesh import Mesh, flush_database
from tests.waiting import eventually_sync, until_sync

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
MODELS = ["square_int32", "repeat_int32", "chaos_recorder", "bls_repeat"]


class StreamMesh:
    def __init__(self, mesh: Mesh, grpc_url: str, record: Path):
        self.mesh, self.grpc_url, self.record = mesh, grpc_url, record
        self.http = f"http://{mesh.url}"
        self.scheduler_port = 0  # the scheduler's health and metrics


@pytest.fixture(scope="module")
def stream_mesh(
    redis_server: PrivateRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StreamMesh]:
    repo = tmp_path_factory.mktemp("stream_repo")
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "make_backend_models.py"), str(repo)]
        + [arg for m in MODELS for arg in ("--model", m)],
        check=True,
        capture_output=True,
    )
    record = tmp_path_factory.mktemp("record")
    flush_database(redis_server.url)
    mesh = Mesh(redis_server.url, repo, log_dir=tmp_path_factory.mktemp("stream_logs"))
    port = free_port()
    bounds = {"CONCH_GATEWAY_DEAD_BOUND_MS": "2000", "CONCH_WORKER_DEAD_BOUND_MS": "2000"}
    try:
        scheduler_port = free_port()
        mesh.start_scheduler(
            CONCH_SCHEDULER_DEAD_BOUND_MS="2000",
            CONCH_SCHEDULER_HEALTH_PORT=str(scheduler_port),
        )
        mesh.start_worker(
            backend="python",
            CONCH_CHAOS_RECORD_DIR=str(record),
            CONCH_CHAOS_LABEL="worker",
            **bounds,
        )
        mesh.start_gateway(CONCH_GATEWAY_GRPC_PORT=str(port), **bounds)
        mesh.wait_ready(MODELS, timeout_s=120)
        streaming = StreamMesh(mesh, f"127.0.0.1:{port}", record)
        streaming.scheduler_port = scheduler_port
        yield streaming
    finally:
        mesh.stop()


def _square(n: int) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([n], dtype=np.int32))
    return [tensor]


def _repeat(values: list[int], delay_ms: int, wait_ms: int = 0) -> list[grpcclient.InferInput]:
    inputs = []
    for name, data, datatype in (
        ("IN", np.array(values, dtype=np.int32), "INT32"),
        ("DELAY", np.full(len(values), delay_ms, dtype=np.uint32), "UINT32"),
        ("WAIT", np.array([wait_ms], dtype=np.uint32), "UINT32"),
    ):
        tensor = grpcclient.InferInput(name, list(data.shape), datatype)
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    return inputs


class Collected:
    """The callback of a gRPC stream, as a queue."""

    def __init__(self) -> None:
        self.items: queue.Queue = queue.Queue()

    def __call__(self, result, error) -> None:
        self.items.put(error if error is not None else result)

    def take(self, count: int, timeout_s: float = 20) -> list:
        return [self.items.get(timeout=timeout_s) for _ in range(count)]

    def drained(self, wait_s: float = 1.0) -> list:
        got = []
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):
                got.append(self.items.get(timeout=0.1))
        return got


def _frames(results: list) -> dict[str, list[tuple[list[int] | None, bool]]]:
    by_id: dict[str, list[tuple[list[int] | None, bool]]] = {}
    for result in results:
        assert not isinstance(result, InferenceServerException), result
        response = result.get_response()
        value = result.as_numpy("OUT").tolist() if response.outputs else None
        final = response.parameters["triton_final_response"].bool_param
        by_id.setdefault(response.id, []).append((value, final))
    return by_id


def test_grpc_stream_answers_zero_one_and_n_responses(stream_mesh: StreamMesh) -> None:
    collected = Collected()
    with grpcclient.InferenceServerClient(stream_mesh.grpc_url) as client:
        client.start_stream(callback=collected)
        for n in (0, 1, 5):
            client.async_stream_infer(
                "square_int32", _square(n), request_id=f"n{n}", enable_empty_final_response=True
            )
        # 0 responses + empty final, 1 + final, 5 + final
        frames = _frames(collected.take(1 + 2 + 6))
        assert frames["n0"] == [(None, True)]
        assert frames["n1"] == [([1], False), (None, True)]
        assert frames["n5"] == [([5], False)] * 5 + [(None, True)]
        # Without enable_empty_final_response, the flags-only final is not sent (Triton).
        client.async_stream_infer("square_int32", _square(2), request_id="quiet")
        frames = _frames(collected.take(2))
        assert frames["quiet"] == [([2], False), ([2], False)]
        assert collected.drained(0.5) == []
        client.stop_stream()


def test_grpc_stream_serves_ordinary_models_and_reports_errors_in_stream(
    stream_mesh: StreamMesh,
) -> None:
    collected = Collected()
    with grpcclient.InferenceServerClient(stream_mesh.grpc_url) as client:
        client.start_stream(callback=collected)
        ident = grpcclient.InferInput("ID", [1, 1], "INT64")
        ident.set_data_from_numpy(np.array([[7]], dtype=np.int64))
        client.async_stream_infer("chaos_recorder", [ident], request_id="ordinary")
        (ordinary,) = collected.take(1)
        assert ordinary.as_numpy("OUTPUT0").tolist() == [[22]]
        assert ordinary.get_response().parameters["triton_final_response"].bool_param
        # An error ends that request only; the stream goes on.
        client.async_stream_infer("square_int32", _square(-1), request_id="bad")
        (error,) = collected.take(1)
        assert isinstance(error, InferenceServerException)
        assert "IN must hold one non-negative integer" in str(error)
        client.async_stream_infer("square_int32", _square(1), request_id="after")
        assert _frames(collected.take(1))["after"] == [([1], False)]
        client.stop_stream()


def test_decoupled_models_are_refused_on_model_infer_and_infer(stream_mesh: StreamMesh) -> None:
    with (
        grpcclient.InferenceServerClient(stream_mesh.grpc_url) as client,
        pytest.raises(InferenceServerException) as refused,
    ):
        client.infer("square_int32", _square(1))
    assert "ModelInfer RPC doesn't support models with decoupled transaction policy" in str(
        refused.value
    )
    body = {"inputs": [{"name": "IN", "shape": [1], "datatype": "INT32", "data": [1]}]}
    answer = httpx.post(f"{stream_mesh.http}/v2/models/square_int32/infer", json=body)
    assert answer.status_code >= 400
    assert answer.json() == {
        "error": "HTTP end point doesn't support models with decoupled transaction policy"
    }


def _events(text: str) -> list[str]:
    return [chunk[len("data: ") :] for chunk in text.split("\n\n") if chunk]


def test_generate_stream_and_generate(stream_mesh: StreamMesh) -> None:
    url = f"{stream_mesh.http}/v2/models/square_int32"
    for n in (0, 1, 3):
        answer = httpx.post(f"{url}/generate_stream", json={"IN": n}, timeout=20)
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        expected = f'{{"model_name":"square_int32","model_version":"1","OUT":{n}}}'
        assert _events(answer.text) == [expected] * n
    single = httpx.post(f"{url}/generate", json={"IN": 1}, timeout=20)
    assert single.json() == {"model_name": "square_int32", "model_version": "1", "OUT": 1}
    many = httpx.post(f"{url}/generate", json={"IN": 2}, timeout=20)
    assert many.status_code >= 400 and "use generate_stream" in many.json()["error"]
    wrong = httpx.post(f"{url}/generate_stream", json={"IN": "x"}, timeout=20)
    assert wrong.status_code == 400 and "'IN'" in wrong.json()["error"]
    # An ordinary model through generate: the input by name, the outputs as keys.
    recorder = httpx.post(
        f"{stream_mesh.http}/v2/models/chaos_recorder/generate", json={"ID": 5}, timeout=20
    )
    assert recorder.json()["OUTPUT0"] == 16


def test_streaming_infer_returns_v2_bodies_as_events(stream_mesh: StreamMesh) -> None:
    url = f"{stream_mesh.http}/v2/models/square_int32/infer"
    for n in (0, 1, 4):
        body = {
            "id": "s",
            "inputs": [{"name": "IN", "shape": [1], "datatype": "INT32", "data": [n]}],
        }
        answer = httpx.post(url, json=body, headers={"Accept": "text/event-stream"}, timeout=20)
        assert answer.status_code == 200
        events = [httpx.Response(200, content=e).json() for e in _events(answer.text)]
        assert len(events) == n
        for event in events:
            assert event["id"] == "s" and event["model_name"] == "square_int32"
            assert event["outputs"] == [
                {"name": "OUT", "datatype": "INT32", "shape": [1], "data": [n]}
            ]


def _bls_repeat(values: list[int], delay_ms: int) -> list[grpcclient.InferInput]:
    inputs = []
    for name, data, datatype in (
        ("IN", np.array(values, dtype=np.int32), "INT32"),
        ("DELAY", np.full(len(values), delay_ms, dtype=np.uint32), "UINT32"),
    ):
        tensor = grpcclient.InferInput(name, list(data.shape), datatype)
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    return inputs


@pytest.mark.parametrize("mode", ["exec", "async_exec"])
def test_decoupled_bls_returns_the_called_models_responses(
    stream_mesh: StreamMesh, mode: str
) -> None:
    """bls_repeat calls repeat_int32 with exec(decoupled=True) / async_exec(decoupled=True) and
    passes each of its responses on: N responses, in order."""
    collected = Collected()
    parameters = {"bls_async": True} if mode == "async_exec" else {}
    with grpcclient.InferenceServerClient(stream_mesh.grpc_url) as client:
        client.start_stream(callback=collected)
        client.async_stream_infer(
            "bls_repeat",
            _bls_repeat([4, 5, 6], 10),
            request_id="bls",
            parameters=parameters,
            enable_empty_final_response=True,
        )
        frames = _frames(collected.take(4))
        assert frames["bls"] == [([4], False), ([5], False), ([6], False), (None, True)]
        # No responses: only the final (the called model's empty final is not passed on).
        client.async_stream_infer(
            "bls_repeat",
            _bls_repeat([], 0),
            request_id="none",
            parameters=parameters,
            enable_empty_final_response=True,
        )
        assert _frames(collected.take(1))["none"] == [(None, True)]
        client.stop_stream()


def test_plain_bls_exec_of_a_decoupled_model_is_an_error_response(
    stream_mesh: StreamMesh,
) -> None:
    collected = Collected()
    with grpcclient.InferenceServerClient(stream_mesh.grpc_url) as client:
        client.start_stream(callback=collected)
        client.async_stream_infer(
            "bls_repeat", _bls_repeat([1], 0), request_id="plain", parameters={"bls_plain": True}
        )
        (error,) = collected.take(1)
        client.stop_stream()
    assert isinstance(error, InferenceServerException)
    assert "model 'repeat_int32' uses the decoupled transaction policy" in error.message()
    assert "exec(decoupled=True)" in error.message()


def test_cancelling_the_caller_cancels_its_decoupled_bls_call(stream_mesh: StreamMesh) -> None:
    """The client of bls_repeat cancels mid-stream: the BLS call it made to repeat_int32 is
    cancelled with it (its child), and repeat_int32 stops (its own record)."""
    marker = "repeat_int32 cancelled"
    path = stream_mesh.mesh.log_dir / "worker.log"  # type: ignore[operator]
    seen = path.read_text(errors="replace").count(marker)
    collected = Collected()
    client = grpcclient.InferenceServerClient(stream_mesh.grpc_url)
    client.start_stream(callback=collected)
    client.async_stream_infer("bls_repeat", _bls_repeat(list(range(50)), 200), request_id="c")
    assert [r.as_numpy("OUT").tolist() for r in collected.take(2)] == [[0], [1]]
    client.stop_stream(cancel_requests=True)
    client.close()
    count = eventually_sync(
        lambda: path.read_text(errors="replace").count(marker), lambda n: n > seen, 15, every=0.1
    )
    assert count == seen + 1


def _stats(stream_mesh: StreamMesh, model: str) -> dict:
    answer = httpx.get(f"{stream_mesh.http}/v2/models/{model}/stats", timeout=10)
    return answer.json()["model_stats"][0]["inference_stats"]


def _worker_log_has(stream_mesh: StreamMesh, text: str, timeout_s: float = 15) -> bool:
    path = stream_mesh.mesh.log_dir / "worker.log"  # type: ignore[operator]
    return until_sync(lambda: text in path.read_text(errors="replace"), timeout_s, every=0.1)


def test_grpc_cancel_while_running_reaches_is_cancelled(stream_mesh: StreamMesh) -> None:
    before = _stats(stream_mesh, "repeat_int32")["cancel"]["count"]
    collected = Collected()
    client = grpcclient.InferenceServerClient(stream_mesh.grpc_url)
    client.start_stream(callback=collected)
    client.async_stream_infer("repeat_int32", _repeat(list(range(50)), 200), request_id="long")
    first = collected.take(2)
    assert [r.as_numpy("OUT").tolist() for r in first] == [[0], [1]]
    client.stop_stream(cancel_requests=True)
    client.close()
    # The model's own record: it saw is_cancelled() and stopped well before 50 responses.
    assert _worker_log_has(stream_mesh, "repeat_int32 cancelled")
    cancelled = eventually_sync(
        lambda: _stats(stream_mesh, "repeat_int32")["cancel"]["count"],
        lambda n: n > before,
        10,
        every=0.2,
    )
    assert cancelled == before + 1


def test_sse_client_disconnect_stops_the_model(stream_mesh: StreamMesh) -> None:
    url = f"{stream_mesh.http}/v2/models/repeat_int32/generate_stream"
    body = {"IN": list(range(50)), "DELAY": [200] * 50, "WAIT": 0}
    marker = "repeat_int32 cancelled"
    path = stream_mesh.mesh.log_dir / "worker.log"  # type: ignore[operator]
    seen = path.read_text(errors="replace").count(marker)
    with httpx.Client(timeout=20) as client, client.stream("POST", url, json=body) as answer:
        lines = answer.iter_lines()
        first = next(line for line in lines if line)
        assert first.startswith("data: ") and '"OUT":0' in first
    # The connection is closed: the model stops at its next response.
    count = eventually_sync(
        lambda: path.read_text(errors="replace").count(marker), lambda n: n > seen, 15, every=0.1
    )
    assert count == seen + 1


def _scheduler_pending(stream_mesh: StreamMesh, model: str) -> float:
    """Triton's pending-request gauge of the scheduler (requests held in its queue)."""
    text = httpx.get(f"http://127.0.0.1:{stream_mesh.scheduler_port}/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith("nv_inference_pending_request_count{") and f'model="{model}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no pending-request gauge for {model}")


def _recorded(record: Path) -> list[str]:
    return [
        line for log in record.glob("exec-*.log") for line in log.read_text().splitlines() if line
    ]


def _raw_infer(port: int, ident: int) -> socket.socket:
    """An /infer request on a raw socket (the test closes it to disconnect)."""
    tensor = {"name": "ID", "shape": [1, 1], "datatype": "INT64", "data": [ident]}
    body = json.dumps({"inputs": [tensor]}).encode()
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(
        b"POST /v2/models/chaos_recorder/infer HTTP/1.1\r\nHost: x\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    return sock


def test_an_ordinary_python_model_sees_is_cancelled_while_it_runs(
    stream_mesh: StreamMesh,
) -> None:
    """chaos_recorder (not decoupled) is held mid-execute; its client disconnects: the model's
    request.is_cancelled() turns true while it still runs (it logs so and stops holding)."""
    record = stream_mesh.record
    for stale in record.glob("holding-worker-*"):
        stale.unlink()
    hold = record / "hold-worker"
    hold.touch()
    try:
        sock = _raw_infer(stream_mesh.mesh.http_port, 9501)
        running = until_sync(lambda: list(record.glob("holding-worker-*")), 10)
        assert running, "the request is not running"
        sock.close()  # the client goes away while its request runs
        assert _worker_log_has(stream_mesh, "chaos_recorder cancelled 9501", timeout_s=10)
        assert hold.exists()  # seen while running, not after the hold ended
    finally:
        hold.unlink(missing_ok=True)


def test_cancel_while_queued_never_runs(stream_mesh: StreamMesh) -> None:
    """Both instances of chaos_recorder are held busy; a third request waits in the queue and
    its client disconnects: it is never executed (the model's record) and counted."""
    base_id = 9000
    record = stream_mesh.record
    port = stream_mesh.mesh.http_port
    url = f"{stream_mesh.http}/v2/models/chaos_recorder/infer"
    before = _stats(stream_mesh, "chaos_recorder")["cancel"]["count"]
    for stale in record.glob("holding-worker-*"):  # left by an earlier hold
        stale.unlink()
    hold = record / "hold-worker"
    hold.touch()
    answers: list[httpx.Response] = []

    def call(ident: int) -> None:
        tensor = {"name": "ID", "shape": [1, 1], "datatype": "INT64", "data": [ident]}
        answers.append(httpx.post(url, json={"inputs": [tensor]}, timeout=30))

    holders = [threading.Thread(target=call, args=(i,)) for i in (base_id + 1, base_id + 2)]
    try:
        for holder in holders:
            holder.start()
            time.sleep(0.2)  # one batch each
        holding = eventually_sync(
            lambda: len(list(record.glob("holding-worker-*"))), lambda n: n >= 2, 10
        )
        assert holding == 2, "the instances are not busy"
        queued = _raw_infer(port, base_id + 3)  # waits: both instances are busy
        time.sleep(0.5)
        queued.close()  # the client goes away while its request waits
        # The scheduler takes it out of its queue at once (counted while both instances are
        # still held): it does not keep its place until a worker reaches it.
        cancelled = eventually_sync(
            lambda: _stats(stream_mesh, "chaos_recorder")["cancel"]["count"],
            lambda n: n > before,
            10,
            every=0.1,
        )
        assert cancelled == before + 1
        assert _scheduler_pending(stream_mesh, "chaos_recorder") == 0
    finally:
        hold.unlink()
    for holder in holders:
        holder.join(30)
    assert sorted(a.json()["outputs"][0]["data"][0] for a in answers) == [
        3 * (base_id + 1) + 1,
        3 * (base_id + 2) + 1,
    ]
    call(base_id + 4)  # runs after the cancelled one was taken from the queue
    lines = _recorded(record)
    assert all(
        any(str(i) in line for line in lines) for i in (base_id + 1, base_id + 2, base_id + 4)
    )
    assert not any(str(base_id + 3) in line for line in lines), "a cancelled request was executed"
    assert _stats(stream_mesh, "chaos_recorder")["cancel"]["count"] == before + 1


def test_worker_killed_mid_stream_ends_the_stream_with_an_error(stream_mesh: StreamMesh) -> None:
    """Runs last: it kills the module's worker."""
    url = f"{stream_mesh.http}/v2/models/repeat_int32/generate_stream"
    body = {"IN": list(range(100)), "DELAY": [100] * 100, "WAIT": 0}
    events: list[str] = []
    with httpx.Client(timeout=60) as client, client.stream("POST", url, json=body) as answer:
        for line in answer.iter_lines():
            if not line:
                continue
            events.append(line)
            if len(events) == 3:
                stream_mesh.mesh.kill("worker")
    assert '"OUT":0' in events[0]
    last = events[-1]
    assert last.startswith('data: {"error":'), last
    assert "died mid-stream" in last and "not replayed" in last
    assert len(events) < 100
