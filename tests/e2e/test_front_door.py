"""The front door under hostile input and overload (issue 12, defects 7 and 8), on a real
gateway process: the caller is authenticated and the announced size checked before a byte of
the body is read, a body is never read or inflated past the limit (413 naming it), gRPC messages
are bounded by the same figure, and beyond the per-process in-flight cap a request is answered
at once."""

from __future__ import annotations

import asyncio
import gzip
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import msgspec
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from conch.ports import free_port
from conch.private_redis import PrivateRedis
from gateway.admin.bodies import TenantBody
from gateway.admin.store import AdminStore
from shared.fleet import model_registry, readiness
from shared.model_config import parse_pbtxt
from shared.runtime import redis_conn
from tests.mesh import Mesh, flush_database

pytestmark = pytest.mark.e2e

MODEL = "door"
KEY = "door-key-0123456789abcdef"
LIMIT = 1024 * 1024
CONFIG = parse_pbtxt(
    f"""
    name: "{MODEL}"
    platform: "onnxruntime_onnx"
    max_batch_size: 8
    input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
    output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
    """
)


async def _prepare(url: str) -> None:
    r = redis_conn.connect(url)
    try:
        await model_registry.publish_model(r, CONFIG)
        # A worker that is "alive" but never answers: admitted requests wait for their deadline.
        await readiness.mark_ready(r, "silent-worker", {(MODEL, 1): 1}, ttl_ms=600_000)
        await AdminStore(r).put_tenant("acme", TenantBody(api_keys=[KEY]))
    finally:
        await r.aclose()


@pytest.fixture(scope="module")
def door(
    redis_server: PrivateRedis, model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Mesh, int]]:
    flush_database(redis_server.url)
    asyncio.run(_prepare(redis_server.url))
    mesh = Mesh(redis_server.url, model_repository, log_dir=tmp_path_factory.mktemp("logs"))
    grpc_port = free_port()
    try:
        mesh.start_gateway(
            processes=1,
            CONCH_GATEWAY_MAX_REQUEST_BYTES=str(LIMIT),
            CONCH_GATEWAY_ALLOW_ANONYMOUS="false",
            CONCH_GATEWAY_MAX_IN_FLIGHT="2",
            CONCH_GATEWAY_DEFAULT_TIMEOUT_MS="3000",
            CONCH_GATEWAY_GRPC_PORT=str(grpc_port),
        )
        mesh.wait_http(f"http://{mesh.url}/v2/models/{MODEL}", 60)
        yield mesh, grpc_port
    finally:
        mesh.stop()


def raw_request(mesh: Mesh, head: str, timeout_s: float = 5.0) -> tuple[int, str]:
    """Send only the request's head (no body) and read the answer: the gateway must answer
    without waiting for a body it will not read."""
    host, port = mesh.url.split(":")
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(head.encode("latin-1"))
        data = b""
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _length(data):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[1].decode()


def _length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":")[1])
    return 0


def head(key: str, length: int, extra: str = "") -> str:
    return (
        f"POST /v2/models/{MODEL}/infer HTTP/1.1\r\nHost: door\r\n"
        f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n{extra}\r\n"
    )


def body(rows: int) -> bytes:
    data = [0.5] * rows
    inputs = [{"name": "INPUT0", "shape": [1, rows], "datatype": "FP32", "data": data}]
    return msgspec.json.encode({"inputs": inputs})


def test_a_body_announced_over_the_limit_is_refused_before_it_is_read(door) -> None:
    """Before: the gateway waited to read a 4 GiB body (and then read all of it)."""
    mesh, _ = door
    status, text = raw_request(mesh, head(KEY, 4 * 1024**3))
    assert status == 413
    assert str(LIMIT) in msgspec.json.decode(text)["error"]


def test_an_unknown_key_is_refused_before_the_body_is_read(door) -> None:
    """Before: the whole body was read (and decompressed) before the caller was known."""
    mesh, _ = door
    status, text = raw_request(mesh, head("not-a-key", 4 * 1024**3))
    assert status == 401
    assert "error" in msgspec.json.decode(text)


def test_a_streamed_body_crossing_the_limit_gets_413(door) -> None:
    mesh, _ = door

    def chunks() -> Iterator[bytes]:
        for _ in range(4):
            yield b" " * (LIMIT // 2)

    response = httpx.post(
        f"http://{mesh.url}/v2/models/{MODEL}/infer",
        content=chunks(),
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=10,
    )
    assert response.status_code == 413
    assert str(LIMIT) in response.json()["error"]


def test_a_gzip_bomb_is_refused_with_413(door) -> None:
    """64 MiB of zeros in about 64 KB: before, inflated whole on the event loop."""
    mesh, _ = door
    bomb = gzip.compress(bytes(64 * 1024 * 1024))
    assert len(bomb) < LIMIT
    response = httpx.post(
        f"http://{mesh.url}/v2/models/{MODEL}/infer",
        content=bomb,
        headers={"Authorization": f"Bearer {KEY}", "Content-Encoding": "gzip"},
        timeout=10,
    )
    assert response.status_code == 413
    assert "gzip-decoded" in response.json()["error"]


def test_a_grpc_message_over_the_limit_is_refused(door) -> None:
    _, grpc_port = door
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    tensor = grpcclient.InferInput("INPUT0", [1, LIMIT // 2], "FP32")
    tensor.set_data_from_numpy(np.zeros((1, LIMIT // 2), np.float32))  # 2 MiB
    with pytest.raises(InferenceServerException) as raised:
        client.infer(MODEL, [tensor], headers={"authorization": f"Bearer {KEY}"})
    assert raised.value.status() == str(grpc.StatusCode.RESOURCE_EXHAUSTED)


def test_an_unknown_grpc_key_is_refused(door) -> None:
    _, grpc_port = door
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    tensor = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.zeros((1, 4), np.float32))
    with pytest.raises(InferenceServerException) as raised:
        client.infer(MODEL, [tensor], headers={"authorization": "Bearer nope"})
    assert raised.value.status() == str(grpc.StatusCode.UNAUTHENTICATED)


async def test_beyond_the_in_flight_cap_a_request_is_answered_at_once(door) -> None:
    """Before: no cap; every request joined the wait, however many the process held."""
    mesh, _ = door
    url = f"http://{mesh.url}/v2/models/{MODEL}/infer"
    auth = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(timeout=10) as client:
        waiting = [
            asyncio.create_task(client.post(url, content=body(4), headers=auth)) for _ in "ab"
        ]
        await asyncio.sleep(0.5)  # both admitted and waiting for a worker that never answers
        started = time.monotonic()
        refused = await client.post(url, content=body(4), headers=auth)
        took = time.monotonic() - started
        assert refused.status_code == 503
        assert "CONCH_GATEWAY_MAX_IN_FLIGHT=2" in refused.json()["error"]
        assert refused.headers.get("retry-after") == "1"
        assert took < 1.5
        done = await asyncio.gather(*waiting)
        assert [r.status_code for r in done] == [503, 503]  # their deadline passed
        assert all("timeout" in r.json()["error"].lower() for r in done)
        # The slots are free again.
        again = await client.post(url, content=body(4), headers=auth)
        assert "MAX_IN_FLIGHT" not in again.json()["error"]
