"""Heartbeats on a thread of their own, with their own synchronous Redis connection.

A service's liveness decides whether others take its work over, so nothing the service does
may delay it: not a long ``execute`` holding the GIL in C, not an event loop blocked by a large
batch, not a pool whose connections are all busy. The thread beats every interval with one
pipeline (registry, plus whatever ``extra`` queues: a worker's readiness), bounded by the
connection's socket timeout; only a frozen process (SIGSTOP, a machine out of CPU for seconds)
stops it, and the *dead* bound that others wait for is well above that.

On a single Redis a beat's replies are read at the next beat (``shared.runtime.deferred_replies``):
the thread wakes once a period, not twice. ``lock`` reads the replies of the beat in flight before
it is held, so that a service that takes it knows every beat computed before has landed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from shared import metrics
from shared.fleet import heartbeats
from shared.runtime import redis_cluster, redis_conn, ticks
from shared.runtime.deferred_replies import DeferredPipeline, commands_of

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
        # takes it, so that no beat computed before lands after (it reads the beat in flight's
        # replies once held).
        self._held = threading.Lock()
        self.lock = _SettlingLock(self)
        self._deferred: DeferredPipeline | None = None
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
        name = f"conch-{self._kind}-heartbeat"
        client = redis_conn.sync_client(self._url, name=name)
        if not redis_cluster.is_cluster(self._url):
            self._deferred = DeferredPipeline(client.connection)  # type: ignore[arg-type]  # single_connection: set
        try:
            while not self._stop.is_set():
                self.beat(client)
                # On the mesh's shared boundaries (``shared.runtime.ticks``): with every other beat.
                self._stop.wait(ticks.until_boundary_monotonic(self._interval_s))
        finally:
            with self.lock:  # the last beat lands before the service deregisters
                self._deferred = None
            client.close()

    def beat(self, client: Any) -> None:
        with self._held:
            self._settle()
            try:
                with client.pipeline(transaction=False) as pipe:
                    heartbeats.queue_heartbeat(
                        pipe, self._kind, self._id, self._info(), self._ttl_ms
                    )
                    if self._extra is not None:
                        self._extra(pipe)
                    if self._deferred is not None:
                        self._deferred.send(commands_of(pipe))  # read at the next beat
                        return
                    pipe.execute()
            except Exception:
                self._failed()
            else:
                self._landed()

    def _settle(self) -> None:
        """Read the replies of the beat in flight (under ``_held``)."""
        if self._deferred is None:
            return
        try:
            landed = self._deferred.settle()
        except Exception:
            self._failed()
        else:
            if landed:
                self._landed()

    def _landed(self) -> None:
        self.beats += 1
        metrics.record_heartbeat(self._kind, True)

    def _failed(self) -> None:
        metrics.record_heartbeat(self._kind, False)
        log.exception("heartbeat failed", extra={"service": self._id})


class _SettlingLock:
    """The heartbeat's lock, as services take it: once held, the beat in flight has landed."""

    def __init__(self, thread: HeartbeatThread):
        self._thread = thread

    def acquire(self) -> bool:
        self._thread._held.acquire()
        self._thread._settle()
        return True

    def release(self) -> None:
        self._thread._held.release()

    def __enter__(self) -> _SettlingLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        """Held from an event loop: taken on a thread (the beat in flight may wait seconds on a
        stalled Redis), and given back even when the waiting task is cancelled (at shutdown)
        after the thread took it. A plain ``await asyncio.to_thread(lock.acquire)`` cancelled
        then leaves it held for good: the thread stops beating, and stopping waits forever."""
        taking = asyncio.ensure_future(asyncio.to_thread(self.acquire))
        try:
            await asyncio.shield(taking)
        except asyncio.CancelledError:
            taking.add_done_callback(self._release_once_taken)
            raise
        try:
            yield
        finally:
            self.release()

    def _release_once_taken(self, taking: asyncio.Future[bool]) -> None:
        if not taking.cancelled() and taking.exception() is None:
            self.release()
