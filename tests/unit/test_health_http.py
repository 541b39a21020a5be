"""The schedulers' and workers' probe and /metrics endpoint over real sockets: the answers, and
what a malformed, oversized or slow request gets (an answer or a closed socket, never a stuck
server)."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator

import pytest

from shared.runtime import health_http
from shared.runtime.exits import EXIT_FINAL
from shared.runtime.health_http import HealthServer


@pytest.fixture
async def endpoint() -> AsyncIterator[tuple[int, asyncio.Event]]:
    ready = asyncio.Event()
    server = await health_http.serve(HealthServer("127.0.0.1", 0, ready).route, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], ready
    finally:
        server.close()
        await server.wait_closed()


async def _exchange(port: int, raw: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), 5)  # until the server closes
    finally:
        writer.close()


def _get(path: str, method: str = "GET") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: probe\r\n\r\n".encode()


async def test_probes_and_metrics_answer(endpoint: tuple[int, asyncio.Event]) -> None:
    port, ready = endpoint
    live = await _exchange(port, _get("/health/live"))
    assert live.startswith(b"HTTP/1.1 200 OK\r\n") and live.endswith(b"\r\n\r\nlive\n")
    assert b"Connection: close\r\n" in live and b"Content-Length: 5\r\n" in live
    assert (await _exchange(port, _get("/v2/health/ready"))).startswith(b"HTTP/1.1 503 ")
    ready.set()
    assert (await _exchange(port, _get("/health/ready?verbose=1"))).endswith(b"ready\n")
    scrape = await _exchange(port, _get("/metrics"))
    assert scrape.startswith(b"HTTP/1.1 200 OK\r\n") and b"conch_redis_roundtrip_seconds" in scrape
    assert (await _exchange(port, _get("/nope"))).startswith(b"HTTP/1.1 404 Not Found\r\n")
    head = await _exchange(port, _get("/health/live", "HEAD"))
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and head.endswith(b"\r\n\r\n")


@pytest.mark.parametrize(
    "raw",
    [
        b"GARBAGE\r\n\r\n",
        b"GET /health/live\r\n\r\n",  # no HTTP version
        b"GET /health/live HTTP/1.1\r\n\r\n",  # no Host
        b"GET /health/live HTTP/1.1\r\nHost: a\r\nBad Header: x\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",  # a TLS hello
    ],
)
async def test_a_malformed_request_is_answered_400_and_closed(
    endpoint: tuple[int, asyncio.Event], raw: bytes
) -> None:
    port, _ = endpoint
    answer = await _exchange(port, raw)
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n"), answer
    assert (await _exchange(port, _get("/health/live"))).endswith(b"live\n")


async def test_an_oversized_head_is_refused(endpoint: tuple[int, asyncio.Event]) -> None:
    port, _ = endpoint
    raw = b"GET /" + b"a" * (4 * health_http.MAX_HEAD_BYTES) + b" HTTP/1.1\r\nHost: a\r\n\r\n"
    answer = await _exchange(port, raw)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:60]


async def test_a_slow_client_neither_blocks_others_nor_holds_its_socket(
    endpoint: tuple[int, asyncio.Event], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(health_http, "HEAD_TIMEOUT_S", 0.3)
    port, _ = endpoint
    slow: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    for _ in range(20):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /health/live HTTP/1.1\r\nHo")  # and then nothing
        slow.append((reader, writer))
    silent = await asyncio.open_connection("127.0.0.1", port)  # says nothing at all
    answer = await asyncio.wait_for(_exchange(port, _get("/health/live")), 1)
    assert answer.endswith(b"live\n")
    for reader, writer in [*slow, silent]:
        assert await asyncio.wait_for(reader.read(), 2) == b""  # closed by the server
        writer.close()


async def test_a_port_in_use_stops_the_service_naming_port_holder_and_setting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Before issue 19 the service ran on without probes; a Kubernetes probe or `conch up` then
    waited in vain (or asked the port's holder instead)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = HealthServer("127.0.0.1", port, asyncio.Event(), setting="CONCH_X_HEALTH_PORT")
        with pytest.raises(SystemExit) as stopped:
            await server.start()
    assert stopped.value.code == EXIT_FINAL
    said = capsys.readouterr().err
    assert f"port {port} (metrics and health) is already in use by pid {os.getpid()}" in said
    assert "CONCH_X_HEALTH_PORT" in said
