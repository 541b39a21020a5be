"""Heartbeats on a thread of their own, with their own synchronous Redis connection.

A service's liveness decides whether others take its work over, so nothing the service does
may delay it: not a long ``execute`` holding the GIL in C, not an event loop blocked by a large
batch, not a pool whose connections are all busy. The thread beats every interval with one
pipeline (registry, plus whatever ``extra`` queues: a worker's readiness), bounded by the
connection's socket timeout; only a frozen process (SIGSTOP, a machine out of CPU for seconds)
stops it, and the *dead* bound that others wait for is well above that.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from shared import heartbeats, metrics, redis_conn

log = logging.getLogger(__name__)


class HeartbeatThread:
    def __init__(
        self,
        redis_url: str,
        kind: str,
        service_id: str,
        *,
        ttl_ms: int,
        interval_ms: int,
        info: Callable[[], Mapping[str, str]],
        extra: Callable[[Any], None] | None = None,
    ):
        self._url = redis_url
        self._kind = kind
        self._id = service_id
        self._ttl_ms = ttl_ms
        self._interval_s = interval_ms / 1000
        self._info = info
        self._extra = extra
        self._stop = threading.Event()
        # Held while a beat is computed and sent: a service that stops announcing something
        # takes it, so that no beat computed before lands after.
        self.lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{kind}", daemon=True)
        self.beats = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop beating (the service deregisters after this, and no late beat may follow)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        client = redis_conn.sync_client(self._url, name=f"conch-{self._kind}-heartbeat")
        try:
            while not self._stop.is_set():
                self.beat(client)
                self._stop.wait(self._interval_s)
        finally:
            client.close()

    def beat(self, client: Any) -> None:
        try:
            with self.lock, client.pipeline(transaction=False) as pipe:
                heartbeats.queue_heartbeat(pipe, self._kind, self._id, self._info(), self._ttl_ms)
                if self._extra is not None:
                    self._extra(pipe)
                pipe.execute()
        except Exception:
            metrics.record_heartbeat(self._kind, False)
            log.exception("heartbeat failed", extra={"service": self._id})
        else:
            self.beats += 1
            metrics.record_heartbeat(self._kind, True)
