"""A tiny HTTP endpoint for services without an HTTP API: health probes and /metrics.

Scheduler and worker processes serve ``/health/live``, ``/health/ready`` and ``/metrics`` here,
so Kubernetes probes and Prometheus reach every service the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY

from shared import metrics

log = logging.getLogger(__name__)


class HealthServer:
    def __init__(self, host: str, port: int, ready: asyncio.Event, registry=REGISTRY):
        self.host = host
        self.port = port
        self._ready = ready
        self._registry = registry
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        if self.port <= 0:
            return
        try:
            self._server = await asyncio.start_server(self._handle, self.host, self.port)
        except OSError as exc:
            log.error(
                "health endpoint could not bind; probes and /metrics are off",
                extra={"port": self.port, "error": str(exc)},
            )

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass
            parts = request_line.decode("latin-1").split()
            path = parts[1] if len(parts) > 1 else "/"
            status, content_type, body = self._route(path.split("?", 1)[0])
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    def _route(self, path: str) -> tuple[str, str, bytes]:
        if path == "/metrics":
            return "200 OK", CONTENT_TYPE_LATEST, metrics.exposition(self._registry)
        if path in ("/health/live", "/v2/health/live"):
            return "200 OK", "text/plain", b"live\n"
        if path in ("/health/ready", "/v2/health/ready"):
            if self._ready.is_set():
                return "200 OK", "text/plain", b"ready\n"
            return "503 Service Unavailable", "text/plain", b"not ready\n"
        return "404 Not Found", "text/plain", b"not found\n"
