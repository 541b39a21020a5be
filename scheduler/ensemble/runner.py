"""The ensemble runner of one (ensemble, version) in a scheduler: its requests and step replies.

The intake hands it what it reads from two kinds of streams of the ensemble's slot:

- the ensemble's request streams: each entry becomes a state in Redis (START) and its first
  steps are submitted. The entry stays pending under this scheduler until the request finishes
  (FINISH acks it, whoever finishes): if this scheduler dies, a live one reclaims the entry after
  the dead bound and resumes the request from its state (steps already submitted are not
  submitted twice). The owner answers a request whose deadline passed;
- the ensemble's step stream (``keys.ensemble_steps``), read by the schedulers' group: the steps
  a reply made runnable are submitted, then the reply is recorded and its entry acked (STEP), in
  one pipeline, so that one dying in between leaves it for a live scheduler.

It has the interface the intake and the service expect of a queue (``add``, ``holds``,
``update``, ``retire``, ``run``...). The work is in ``scheduler.ensemble.work``, the planning in
``scheduler.ensemble.progress``.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, cast

import redis.asyncio as aioredis

from scheduler.ensemble.known import KnownStates
from scheduler.ensemble.progress import EnsembleProgress, Resolve
from scheduler.ensemble.work import EnsembleWork
from shared.fleet import streams
from shared.model_config import ModelConfig
from shared.model_config.ensemble_graph import steps_of
from shared.wire import envelope, keys
from shared.wire.envelope import InferRequest, RequestHeader
from shared.wire.errors import ErrorCode

log = logging.getLogger(__name__)


class EnsembleRunner:
    def __init__(
        self,
        r: aioredis.Redis,
        config: ModelConfig,
        version: int,
        gone_ms: int,
        resolve: Resolve,
        *,
        consumer: str,
        on_failure: Callable[[], None] | None = None,
        direct: bool = True,
    ):
        self._redis = r
        self.model = config.name
        self.version = version
        self.consumer = consumer
        self._on_failure = on_failure
        self.progress = EnsembleProgress(
            r,
            config,
            version,
            steps_of(config),
            gone_ms,
            resolve,
            on_finished=self.finished,
            direct=direct,
        )
        self.known = KnownStates()
        self.work = EnsembleWork(self.progress, self.known)
        self.steps_stream = keys.ensemble_steps(self.model, version).encode()
        # Request entries this scheduler owns: request id -> (deadline ms, stream, entry id).
        self._owned: dict[str, tuple[int, bytes, bytes]] = {}
        self._deadlines: list[tuple[int, str]] = []
        self._working: set[bytes] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._woken = asyncio.Event()
        self._arrivals: list[tuple[RequestHeader, bytes, bytes, bytes]] = []
        self._replies: list[streams.Entry] = []
        self._flush_due = False

    # --- the queue interface -----------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._owned)

    def update(self, config: ModelConfig, instances: int) -> None:
        if config.json != self.progress.config.json:
            self.progress.config = config
            self.progress.steps = steps_of(config)

    def export(self) -> None:
        """Nothing of its own to export: its counters are recorded as requests finish."""

    def on_batch_done(self) -> None:
        """Ensembles have no batches of their own."""

    def holds(self, stream: bytes, entry_id: bytes) -> bool:
        if stream == self.steps_stream:
            return entry_id in self._working
        return any(s == stream and e == entry_id for _, s, e in self._owned.values())

    def add(self, header: RequestHeader, stream: bytes, entry_id: bytes, data: bytes) -> None:
        """A request entry read (or reclaimed, or recovered) by the intake."""
        self._owned[header.id] = (header.deadline_ms, stream, entry_id)
        heapq.heappush(self._deadlines, (header.deadline_ms, header.id))
        self._woken.set()
        self._arrivals.append((header, stream, entry_id, data))
        self._soon()

    def on_step_reply(self, entry: streams.Entry) -> None:
        if entry.entry_id in self._working:
            return
        self._working.add(entry.entry_id)
        self._replies.append(entry)
        self._soon()

    def _soon(self) -> None:
        """What one read brought is written together: one pipeline per stage for all of it. The
        task starts when the intake yields after accepting the read (before its next read)."""
        if not self._flush_due:
            self._flush_due = True
            self._spawn(self._flush(), "flush")

    async def _flush(self) -> None:
        self._flush_due = False
        arrivals, self._arrivals = self._arrivals, []
        entries, self._replies = self._replies, []
        if arrivals and entries:
            self._spawn(self._start(arrivals), "start")
        elif arrivals:
            await self._start(arrivals)
        if entries:
            await self._step_replies(entries)

    async def retire(self, reason: str) -> None:
        """Answer every request this scheduler owns with an error (its version is unloaded)."""
        for request_id in list(self._owned):
            await self._answer_owned(request_id, ErrorCode.UNAVAILABLE, reason)

    async def run(self) -> None:
        """Answer the owned requests whose deadline passed (their state says how far they got)."""
        while True:
            now = int(time.time() * 1000)
            while self._deadlines and self._deadlines[0][0] <= now:
                deadline, request_id = heapq.heappop(self._deadlines)
                owned = self._owned.get(request_id)
                if owned is None or owned[0] != deadline:
                    continue
                await self._guarded(
                    self._answer_owned(
                        request_id,
                        ErrorCode.DEADLINE_EXCEEDED,
                        f"Request timeout expired: ensemble '{self.model}' did not finish "
                        "before its deadline",
                    )
                )
            self._woken.clear()
            if not self._deadlines:  # nothing owned: sleep until a request is (idle: no wake-up)
                await self._woken.wait()
                continue
            wait_s = (self._deadlines[0][0] - now) / 1000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), timeout=min(1.0, max(wait_s, 0.005)))

    # --- the work ----------------------------------------------------------------------------

    async def _start(self, arrivals: list[tuple[RequestHeader, bytes, bytes, bytes]]) -> None:
        """Create (or find: a resumed request) each request's state with its first steps: one
        pipeline for every request one read brought."""
        try:
            await self.work.start(arrivals, int(time.time() * 1000))
        except BaseException:
            for header, _, _, _ in arrivals:  # not started: the intake's recovery reads it again
                self._owned.pop(header.id, None)
                self.known.drop(header.id)
            raise

    async def _step_replies(self, entries: list[streams.Entry]) -> None:
        """Record the replies, submit what they made runnable, answer what they finished and
        ack the entries: one pipeline (``scheduler.ensemble.work``)."""
        try:
            await self.work.step_replies(entries, int(time.time() * 1000))
        except BaseException:
            self.known.clear()  # what the failed write said may not be in Redis: read it again
            raise
        finally:
            for entry in entries:
                self._working.discard(entry.entry_id)

    async def _answer_owned(self, request_id: str, code: ErrorCode, message: str) -> None:
        owned = self._owned.get(request_id)
        if owned is None:
            return
        _, stream, entry_id = owned
        # decode_responses=False: a hash of bytes (redis-py's annotation allows str).
        state = cast(
            dict[bytes, bytes], await self._redis.hgetall(self.progress.state_key(request_id))
        )
        if state:
            request = _request_of(state)
            await self.progress.apply([self.progress.failure(request, state, code, message)])
        else:  # finished by another scheduler (which acked the entry), or lost: ack it anyway
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.xack(stream, keys.SCHEDULER_GROUP, entry_id)
                pipe.xdel(stream, entry_id)
                await pipe.execute()
        self._owned.pop(request_id, None)

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(self._guarded(work), name=f"ensemble-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _guarded(self, work: Coroutine[Any, Any, None]) -> None:
        """A failed write leaves the entry pending: the intake recovers it and it runs again."""
        try:
            await work
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception(
                "ensemble step failed; its entry stays pending", extra={"model": self.model}
            )
            if self._on_failure is not None:
                self._on_failure()

    def finished(self, request_id: str) -> None:
        """Called by the progress once a request is finished (by this scheduler)."""
        self._owned.pop(request_id, None)
        self.known.drop(request_id)


def _request_of(state: dict[bytes, bytes]) -> InferRequest:
    return envelope.decode_request(state[b"req"])
