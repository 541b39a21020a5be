"""Deadlines only where someone asked (issue 28, item 1), through a real mesh with its bounds
lowered: the unary bound (``CONCH_GATEWAY_DEFAULT_TIMEOUT_MS``) 1 s, the stream silence bound
(``CONCH_GATEWAY_STREAM_SILENCE_TIMEOUT_MS``) 2.5 s.

``repeat_int32`` (``examples/make_backend_models.py``) sends one response per element of ``IN``
after ``DELAY[i]`` ms. A stream with responses 1.5 s apart (beyond the unary bound, within the
silence bound) lasting 6 s (beyond both) arrives whole through gRPC ``ModelStreamInfer`` and SSE;
a stream silent past the silence bound ends with an error naming it; a client's ``timeout`` and
a tenant's ``timeout_ms`` still cut.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from conch.ports import free_port
from conch.private_redis import PrivateRedis
from tests.mesh import Mesh, flush_database
from tests.waiting import eventually_sync

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
MODELS = ["repeat_int32", "square_int32"]
ADMIN_TOKEN = "deadline-admin-token-0123456789"
UNARY_MS, SILENCE_MS = 1_000, 2_500
SPACING_MS = 1_500  # beyond the unary bound, within the silence bound
COUNT = 4  # 6 s in all: beyond every bound


def make_repository(repo: Path, instances: int = 2) -> Path:
    """``repeat_int32`` and ``square_int32``; ``repeat_int32`` with ``instances`` instances, so
    that a stream still sleeping in one does not hold back the next test."""
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "make_backend_models.py"), str(repo)]
        + [arg for m in MODELS for arg in ("--model", m)],
        check=True,
        capture_output=True,
    )
    config = repo / "repeat_int32" / "config.pbtxt"
    config.write_text(config.read_text().replace("count: 1", f"count: {instances}"))
    return repo


class Deadlines:
    def __init__(self, mesh: Mesh, grpc_url: str):
        self.mesh, self.grpc_url = mesh, grpc_url
        self.http = f"http://{mesh.url}"


@pytest.fixture(scope="module")
def deadlines_mesh(
    redis_server: PrivateRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deadlines]:
    repo = make_repository(tmp_path_factory.mktemp("deadline_repo"))
    flush_database(redis_server.url)
    mesh = Mesh(redis_server.url, repo, log_dir=tmp_path_factory.mktemp("deadline_logs"))
    port = free_port()
    try:
        mesh.start_scheduler()
        mesh.start_worker(backend="python")
        mesh.start_gateway(
            processes=1,
            CONCH_GATEWAY_GRPC_PORT=str(port),
            CONCH_GATEWAY_ADMIN_TOKEN=ADMIN_TOKEN,
            CONCH_GATEWAY_DEFAULT_TIMEOUT_MS=str(UNARY_MS),
            CONCH_GATEWAY_STREAM_SILENCE_TIMEOUT_MS=str(SILENCE_MS),
        )
        mesh.wait_ready(MODELS, timeout_s=120)
        yield Deadlines(mesh, f"127.0.0.1:{port}")
    finally:
        mesh.stop()


def repeat_inputs(delays_ms: list[int], wait_ms: int = 0) -> list[grpcclient.InferInput]:
    inputs = []
    for name, data, datatype in (
        ("IN", np.arange(len(delays_ms), dtype=np.int32), "INT32"),
        ("DELAY", np.array(delays_ms, dtype=np.uint32), "UINT32"),
        ("WAIT", np.array([wait_ms], dtype=np.uint32), "UINT32"),
    ):
        tensor = grpcclient.InferInput(name, list(data.shape), datatype)
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    return inputs


def repeat_body(delays_ms: list[int], wait_ms: int = 0, **parameters: Any) -> dict[str, Any]:
    n = len(delays_ms)
    body: dict[str, Any] = {
        "inputs": [
            {"name": "IN", "shape": [n], "datatype": "INT32", "data": list(range(n))},
            {"name": "DELAY", "shape": [n], "datatype": "UINT32", "data": delays_ms},
            {"name": "WAIT", "shape": [1], "datatype": "UINT32", "data": [wait_ms]},
        ]
    }
    if parameters:
        body["parameters"] = parameters
    return body


class Timed:
    """A gRPC stream's callback: each result or error with the time it arrived."""

    def __init__(self) -> None:
        self.items: queue.Queue[tuple[float, Any]] = queue.Queue()

    def __call__(self, result: Any, error: Any) -> None:
        self.items.put((time.monotonic(), error if error is not None else result))

    def take(self, count: int, timeout_s: float) -> list[tuple[float, Any]]:
        return [self.items.get(timeout=timeout_s) for _ in range(count)]


def grpc_stream(
    url: str,
    delays_ms: list[int],
    count: int,
    timeout_s: float,
    wait_ms: int = 0,
    **options: Any,
) -> tuple[float, list[tuple[float, Any]], Timed]:
    """Send one repeat_int32 request on a stream; its start and its first ``count`` items."""
    timed = Timed()
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(callback=timed)
        started = time.monotonic()
        client.async_stream_infer("repeat_int32", repeat_inputs(delays_ms, wait_ms), **options)
        items = timed.take(count, timeout_s)
        client.stop_stream()
    return started, items, timed


def sse_events(
    url: str, body: dict[str, Any], headers: dict[str, str] | None = None, timeout_s: float = 30
) -> tuple[float, list[tuple[float, dict[str, Any]]]]:
    """POST with ``Accept: text/event-stream``; each event's body with the time it arrived."""
    got: list[tuple[float, dict[str, Any]]] = []
    started = time.monotonic()
    with httpx.stream(
        "POST",
        url,
        json=body,
        headers={"Accept": "text/event-stream", **(headers or {})},
        timeout=timeout_s,
    ) as answer:
        assert answer.status_code == 200, answer.read()
        for line in answer.iter_lines():
            if line.startswith("data: "):
                got.append((time.monotonic(), json.loads(line[len("data: ") :])))
    return started, got


def test_grpc_stream_outlives_every_default_bound(deadlines_mesh: Deadlines) -> None:
    started, items, timed = grpc_stream(
        deadlines_mesh.grpc_url,
        [SPACING_MS] * COUNT,
        COUNT + 1,
        timeout_s=10,
        request_id="long",
        enable_empty_final_response=True,
    )
    errors = [item for _, item in items if isinstance(item, InferenceServerException)]
    assert not errors, errors
    values = [r.as_numpy("OUT").tolist() for _, r in items[:COUNT]]
    assert values == [[i] for i in range(COUNT)]
    finals = [r.get_response().parameters["triton_final_response"].bool_param for _, r in items]
    assert finals == [False] * COUNT + [True]
    gaps = [b - a for (a, _), (b, _) in zip([(started, None), *items[:-1]], items, strict=True)]
    assert all(gap > UNARY_MS / 1000 for gap in gaps[:COUNT]), gaps
    assert items[-1][0] - started > SILENCE_MS / 1000 * 2  # longer than every bound
    assert timed.items.empty()


def test_sse_stream_outlives_every_default_bound(deadlines_mesh: Deadlines) -> None:
    url = f"{deadlines_mesh.http}/v2/models/repeat_int32/infer"
    started, events = sse_events(url, repeat_body([SPACING_MS] * COUNT))
    assert all("error" not in e for _, e in events), events
    assert [e["outputs"][0]["data"] for _, e in events if e["outputs"]] == [
        [i] for i in range(COUNT)
    ]
    assert events[-1][0] - started > SILENCE_MS / 1000 * 2


def test_silent_stream_ends_with_an_error_naming_the_bound(deadlines_mesh: Deadlines) -> None:
    # One response at once, then silence beyond the bound.
    _, items, _ = grpc_stream(deadlines_mesh.grpc_url, [50, SILENCE_MS + 1_500], 2, 10)
    (first_at, first), (ended_at, error) = items
    assert first.as_numpy("OUT").tolist() == [0]
    assert isinstance(error, InferenceServerException), error
    assert f"sent no response for {SILENCE_MS} ms" in str(error), error
    assert "CONCH_GATEWAY_STREAM_SILENCE_TIMEOUT_MS" in str(error)
    assert SILENCE_MS / 1000 - 0.1 <= ended_at - first_at <= SILENCE_MS / 1000 + 1.0


def test_client_timeout_still_cuts_a_stream(deadlines_mesh: Deadlines) -> None:
    asked_us = 2_000_000  # Triton's timeout parameter, in microseconds
    started, items, _ = grpc_stream(
        deadlines_mesh.grpc_url, [SPACING_MS] * COUNT, 2, 10, timeout=asked_us
    )
    (_, first), (ended_at, error) = items
    assert first.as_numpy("OUT").tolist() == [0]
    assert isinstance(error, InferenceServerException), error
    assert "Request timeout expired" in str(error)
    assert 1.9 <= ended_at - started <= 2.9
    # The same through SSE, as a request parameter.
    url = f"{deadlines_mesh.http}/v2/models/repeat_int32/infer"
    started, events = sse_events(url, repeat_body([SPACING_MS] * COUNT, timeout=asked_us))
    assert [e["outputs"][0]["data"] for _, e in events[:-1]] == [[0]]
    assert "Request timeout expired" in events[-1][1]["error"]
    assert 1.9 <= events[-1][0] - started <= 2.9


def test_tenant_timeout_cuts_its_streams(deadlines_mesh: Deadlines) -> None:
    key = "bounded-key-0123456789"
    cli = [sys.executable, "-m", "conch", "admin", "--url", deadlines_mesh.mesh.url]
    put = subprocess.run(
        [
            *cli,
            "--token",
            ADMIN_TOKEN,
            "tenants",
            "put",
            "bounded",
            "--key",
            key,
            "--timeout-ms",
            "2000",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert put.returncode == 0, put.stderr
    assert json.loads(put.stdout)["timeout_ms"] == 2000
    view = httpx.get(
        f"{deadlines_mesh.http}/v2/admin/tenants/bounded",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
    )
    assert view.json()["timeout_ms"] == 2000
    headers = {"Authorization": f"Bearer {key}"}
    probe = f"{deadlines_mesh.http}/v2/models/square_int32/generate_stream"
    eventually_sync(
        lambda: httpx.post(probe, json={"IN": 1}, headers=headers).status_code,
        lambda status: status == 200,
        10,
        every=0.1,
    )
    url = f"{deadlines_mesh.http}/v2/models/repeat_int32/infer"
    started, events = sse_events(url, repeat_body([SPACING_MS] * COUNT), headers)
    assert [e["outputs"][0]["data"] for _, e in events[:-1]] == [[0]]
    assert "Request timeout expired" in events[-1][1]["error"]
    assert 1.9 <= events[-1][0] - started <= 2.9
    # Without the tenant's key, the same stream runs whole.
    _, whole = sse_events(url, repeat_body([SPACING_MS] * COUNT))
    assert len(whole) == COUNT and all("error" not in e for _, e in whole)
