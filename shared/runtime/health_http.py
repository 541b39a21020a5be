"""Health probes and ``/metrics`` for services without an HTTP API, parsed by h11.

Scheduler and worker processes serve ``/health/live``, ``/health/ready`` (and the ``/v2/``
spellings) and ``/metrics`` here, and the control plane serves its own routes through
:func:`serve`, so Kubernetes probes and Prometheus reach every service the same way.

h11 (the HTTP/1.1 parser uvicorn itself can run on) parses each request, so a malformed request
line, an oversized head or conflicting framing headers are answered 400 and closed, never
guessed at. h11 rather than uvicorn's server: uvicorn has no deadline for a request's head
(uvicorn issue 157), and a client that trickles bytes must not hold a probe port's sockets; here a
request's head must arrive within ``HEAD_TIMEOUT_S`` and every connection answers one request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Callable
from http import HTTPStatus

import h11
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry

from shared import metrics
from shared.runtime.exits import EXIT_FINAL
from shared.runtime.listen import port_error

log = logging.getLogger(__name__)

HEAD_TIMEOUT_S = 5.0  # the request line and headers, from the connection's first moment
WRITE_TIMEOUT_S = 10.0  # the answer, to a client that reads slowly (Prometheus' scrape timeout)
MAX_HEAD_BYTES = 16 * 1024

# (method, path without the query) -> (status, content type, body)
Route = Callable[[str, str], tuple[int, str, bytes]]


async def serve(route: Route, host: str, port: int) -> asyncio.Server:
    """Listen on ``host:port`` (0: any free port) and answer each request with ``route``."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await _exchange(route, reader, writer)
        except (TimeoutError, ConnectionError):
            pass
        except Exception:  # a failing route closes its connection, never the server
            log.exception("health endpoint failed to answer")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    return await asyncio.start_server(handle, host, port)


async def _exchange(
    route: Route, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
    try:
        async with asyncio.timeout(HEAD_TIMEOUT_S):
            request = await _read_request(conn, reader)
    except h11.RemoteProtocolError as exc:  # answered, then closed, like any other request
        method = ""
        status, content_type, body = exc.error_status_hint, "text/plain", b"bad request\n"
    else:
        if request is None:
            return  # the client left before sending a request
        method = request.method.decode("ascii")
        path = request.target.decode("latin-1").split("?", 1)[0]
        status, content_type, body = route(method, path)
    head = h11.Response(
        status_code=status,
        reason=HTTPStatus(status).phrase.encode(),
        headers=[
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("Connection", "close"),
        ],
    )
    writer.write(conn.send(head))
    if method != "HEAD":
        writer.write(conn.send(h11.Data(data=body)))
    writer.write(conn.send(h11.EndOfMessage()))
    async with asyncio.timeout(WRITE_TIMEOUT_S):
        await writer.drain()


async def _read_request(conn: h11.Connection, reader: asyncio.StreamReader) -> h11.Request | None:
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(MAX_HEAD_BYTES))
            continue
        return event if isinstance(event, h11.Request) else None


class HealthServer:
    """Probes and ``/metrics`` of a scheduler or worker.

    The port is bound without ``SO_REUSEPORT`` (``shared.runtime.listen``): a port another process
    holds stops the service at start with ``EXIT_FINAL`` and a message naming the port, its holder
    and ``setting``, rather than running on unprobed (a Kubernetes probe or ``conch up`` would wait
    for it in vain, or ask the holder instead).
    """

    def __init__(
        self,
        host: str,
        port: int,
        ready: asyncio.Event,
        registry: CollectorRegistry = REGISTRY,
        setting: str = "the service's HEALTH_PORT setting",
    ):
        self.host = host
        self.port = port
        self._ready = ready
        self._registry = registry
        self._setting = setting
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        if self.port <= 0:
            return
        try:
            self._server = await serve(self.route, self.host, self.port)
        except OSError as exc:
            error = port_error(exc, self.port, "metrics and health", self._setting)
            log.error("health endpoint could not bind", extra={"error": str(error)})
            print(f"conch: {error}", file=sys.stderr, flush=True)
            raise SystemExit(EXIT_FINAL) from None

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    def route(self, method: str, path: str) -> tuple[int, str, bytes]:
        """Status, content type and body for one request (pure, for the tests)."""
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, metrics.exposition(self._registry)
        if path in ("/health/live", "/v2/health/live"):
            return 200, "text/plain", b"live\n"
        if path in ("/health/ready", "/v2/health/ready"):
            if self._ready.is_set():
                return 200, "text/plain", b"ready\n"
            return 503, "text/plain", b"not ready\n"
        return 404, "text/plain", b"not found\n"
