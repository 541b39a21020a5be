"""``/v2/health/ready`` and gRPC ``ServerReady``: Triton's strict readiness, for a mesh.

Strict (the default): ready only when every model the mesh is expected to serve
(``shared.fleet.expected_models``) has a ready version in this process's model table, and no other
process of this gateway service that accepts connections lacks one. A process that starts while
its siblings are ready (a restart, a scale-up) does not accept connections before its own table
holds every model, so no request it would take meets a missing model.
Not strict (``CONCH_GATEWAY_STRICT_READINESS=false``): ready once Redis answers and the table has
been read once, whatever it holds.
"""

from __future__ import annotations

import asyncio
import logging
import time

import redis.asyncio as aioredis

from gateway.core.model_table import ModelTable
from gateway.runtime.status import NOT_READY, READY, STARTING, GatewayProcess

log = logging.getLogger(__name__)

_LISTED = 5  # models named in a not-ready answer before "and N more"


class Readiness:
    def __init__(
        self,
        table: ModelTable,
        strict: bool,
        process: GatewayProcess | None,
        serves_grpc: bool = False,
    ):
        self._table = table
        self.strict = strict
        self._grpc = serves_grpc
        self._process = process
        self._accepting = False
        # Set when the process stops accepting (it is stopping): gRPC health watchers end.
        self.stopping = asyncio.Event()
        table.on_refresh(self._publish)

    def own(self) -> str | None:
        """Why this process is not ready (None: it is)."""
        table = self._table
        if not table.loaded.is_set():
            return "the model table has not been read from Redis yet"
        if not self.strict:
            return None
        if not table.expectations.scanned:
            return "no worker has read the model repository yet"
        if table.not_ready:
            names = table.not_ready
            listed = ", ".join(f"'{n}'" for n in names[:_LISTED])
            more = f" and {len(names) - _LISTED} more" if len(names) > _LISTED else ""
            return f"not every model is ready: waiting for {listed}{more}"
        return None

    async def check(self, redis: aioredis.Redis) -> str | None:
        """Why the gateway service is not ready (None: it is), for a probe."""
        try:
            await redis.ping()
            await self._table.current()  # a worker counted ready may have expired since
        except Exception as exc:
            return f"the mesh's Redis is unreachable ({type(exc).__name__})"
        reason = self.own()
        if reason is not None or self._process is None:
            return reason
        if self._grpc and self._process.grpc_process_state() == STARTING:
            # gRPC is the first process's: ready means both protocols answer.
            return "the gateway's gRPC endpoint is not serving yet"
        if not self.strict:
            return None
        if NOT_READY in self._process.siblings():
            return "another process of this gateway service is not ready yet"
        return None

    async def wait_to_accept(self, timeout_s: float) -> None:
        """A process joining siblings that are ready waits (a bounded time) for its own table."""
        if not self.strict or self._process is None or READY not in self._process.siblings():
            return
        deadline = time.monotonic() + timeout_s
        # A stop asked meanwhile ends the wait: the server holds a SIGTERM until start-up ends.
        while self.own() is not None and not self._process.stopping.is_set():
            if time.monotonic() > deadline:
                log.warning(
                    "accepting connections before every model is in this process's table",
                    extra={"reason": self.own(), "waited_s": timeout_s},
                )
                return
            await asyncio.sleep(0.05)

    def start_accepting(self) -> None:
        self._accepting = True
        self._publish()

    def stop_accepting(self) -> None:
        self._accepting = False
        self.stopping.set()
        if self._process is not None:
            self._process.set(STARTING)

    def _publish(self) -> None:
        if self._accepting and self._process is not None:
            self._process.set(READY if self.own() is None else NOT_READY)
