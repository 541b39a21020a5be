"""``/metrics`` and ``/v2/health/{live,ready}`` of the control plane.

The control plane has no other HTTP surface, so a framework would be all cost: these are the
three GETs that Prometheus and the orchestrators (compose healthcheck, Kubernetes probes) send,
with the same paths as the gateway's health endpoints, served by the schedulers' and workers'
small h11 server (``shared.runtime.health_http``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from controlplane.metrics import Metrics
from shared.runtime import health_http

log = logging.getLogger("controlplane.health")


class HealthServer:
    def __init__(self, metrics: Metrics, ready: Callable[[], bool]):
        self.metrics = metrics
        self.ready = ready
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        """Listen (port 0: any free one) and return the bound port; a port in use is an error."""
        self._server = await health_http.serve(self.route, host, port)
        bound = self._server.sockets[0].getsockname()[1]
        log.info("health server listening", extra={"host": host, "port": bound})
        return int(bound)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
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
