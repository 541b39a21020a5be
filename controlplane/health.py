"""``/metrics`` and ``/v2/health/{live,ready}`` on a tiny asyncio HTTP server.

The control plane has no other HTTP surface, so a framework would be all cost: this answers the
three GETs that Prometheus and the orchestrators (compose healthcheck, Kubernetes probes) send,
with the same paths as the gateway's health endpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from controlplane.metrics import Metrics

log = logging.getLogger("controlplane.health")

_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


class HealthServer:
    def __init__(self, metrics: Metrics, ready: Callable[[], bool]):
        self.metrics = metrics
        self.ready = ready
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._handle, host, port)
        bound = self._server.sockets[0].getsockname()[1]
        log.info("health server listening", extra={"host": host, "port": bound})
        return int(bound)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def route(self, method: str, path: str) -> tuple[int, str, bytes]:
        """Status, content type and body for one request (pure, for the tests)."""
        path = path.split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return 405, "text/plain", b"method not allowed\n"
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(self.metrics.registry)
        if path == "/v2/health/live":
            return 200, "text/plain", b"live\n"
        if path == "/v2/health/ready":
            if self.ready():
                return 200, "text/plain", b"ready\n"
            return 503, "text/plain", b"no snapshot published yet\n"
        return 404, "text/plain", b"not found\n"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
            method, path, *_ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
            status, content_type, body = self.route(method, path)
            writer.write(
                f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("latin-1")
            )
            if method != "HEAD":
                writer.write(body)
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
