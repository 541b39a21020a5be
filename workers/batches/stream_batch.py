"""One batch of a decoupled model: responses published as they are sent, the ack at the end.

``execute`` of a decoupled model may answer each request with zero or more responses and a
final one, from its own threads and after it returned (Triton's response sender). Every
response becomes a reply frame (``seq`` 0, 1, ...; ``final`` on the last) published to the
caller's reply stream at once, in order; several frames queued meanwhile go in one round trip.
The instance takes its next batch as soon as ``execute`` returned, as in Triton; the batch
entry stays pending (and held by the lane) until every request sent its final frame, and is
then acked with the usual fenced script and its statistics.

Cancellation: requests whose cancel key exists never run (CANCELLED); while streams are open
their keys are polled every ``cancel_check.POLL_S`` and the instance is told
(``is_cancelled()``). A request still open at its deadline ends with a timeout error and is
cancelled in the model: a stream's deadline is the silence bound after its last response, not
its age, unless someone asked (``shared.wire.deadlines``). A model process that dies ends its
open streams with an error naming the cause (the backend sends it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import redis.asyncio as aioredis

from shared import metrics
from shared.fleet import streams
from shared.fleet.cancel_marks import CANCELLED_TEXT
from shared.fleet.publish import queue_replies
from shared.metrics import response_stats
from shared.wire import envelope, tensors
from shared.wire.envelope import InferRequest, Reply
from shared.wire.errors import ConchError, ErrorCode
from workers.backend import Execution, ModelInstance, ModelRequest
from workers.batches import ragged
from workers.batches.cancel_check import POLL_S, cancelled_ids
from workers.batches.open_stream import OpenStream
from workers.batches.stream_sink import LoopSink, ack_streamed, numbered, output_datatype
from workers.loading.loader import LoadedVersion

log = logging.getLogger(__name__)

Submit = Callable[..., Awaitable[Execution]]


class StreamBatch:
    def __init__(
        self,
        redis: aioredis.Redis,
        worker_id: str,
        loaded: LoadedVersion,
        instance: ModelInstance,
        entry: streams.Entry,
    ):
        self._redis = redis
        self._id = worker_id
        self._loaded = loaded
        self._instance = instance
        self._entry = entry
        self._open: dict[str, OpenStream] = {}
        self._outgoing: list[tuple[str, Reply]] = []
        self._flushing: asyncio.Task[None] | None = None
        self._all_done = asyncio.Event()
        self._stats = {"success_count": 0, "fail_count": 0, "cancel_count": 0}
        self._queue_ns = 0
        # Triton's compute_input and compute_output; when execute started (perf_counter_ns).
        self._input_ns = self._output_ns = self._started_ns = 0

    async def start(
        self, requests: list[InferRequest], queue_ns: list[int], submit: Submit
    ) -> asyncio.Task[None]:
        """Answer what may not run, run the rest until ``execute`` returns; the returned task
        finishes the streams and acks the batch."""
        config = self._loaded.model.config
        now_ms = time.time() * 1000
        try:
            cancelled = await cancelled_ids(self._redis, config.name, [r.id for r in requests])
        except Exception:  # cannot ask: run them (the deadline still bounds the work)
            log.warning("could not read cancel keys", exc_info=True)
            cancelled = set()
        model_requests: list[ModelRequest] = []
        self._queue_ns = 0
        input_started = time.perf_counter_ns()
        for index, request in enumerate(requests):
            if request.id in cancelled:
                self._end(request, ErrorCode.CANCELLED, CANCELLED_TEXT, "cancel_count")
            elif now_ms >= request.deadline_ms:
                self._end(
                    request,
                    ErrorCode.UNAVAILABLE,
                    "Request timeout expired: the deadline passed before execution",
                    "fail_count",
                )
            else:
                try:
                    model_requests.append(
                        ModelRequest(
                            id=request.id,
                            inputs={t.name: tensors.to_numpy(t) for t in request.inputs},
                            requested_outputs=request.outputs or config.output_names,
                            parameters=request.parameters,
                        )
                    )
                    self._open[request.id] = OpenStream(request)
                    self._queue_ns += queue_ns[index] if index < len(queue_ns) else 0
                except ConchError as exc:
                    self._end(request, exc.code, exc.message, "fail_count")
        self._input_ns = time.perf_counter_ns() - input_started
        self._started_ns = time.perf_counter_ns()
        execution = None
        # Cancels and deadlines are watched from now on, while execute runs too.
        watch = asyncio.create_task(self._watch(config.name))
        ragged.add_batch_inputs(config, model_requests)
        if model_requests:
            sink = LoopSink(asyncio.get_running_loop(), self.frame)
            metrics.child(metrics.EXECUTIONS_IN_FLIGHT, config.name, self._loaded.version).inc()
            try:
                execution = await submit(
                    self._instance, self._instance.execute_decoupled, model_requests, sink
                )
            except Exception as exc:  # the backend itself failed: end what it left open
                error = ConchError(ErrorCode.INTERNAL, f"model '{config.name}' failed: {exc}")
                for request_id in list(self._open):
                    self.frame(request_id, None, error, True)
            finally:
                metrics.child(metrics.EXECUTIONS_IN_FLIGHT, config.name, self._loaded.version).dec()
        self._flush()
        return asyncio.create_task(self._finish(model_requests, execution, watch))

    def frame(
        self,
        request_id: str,
        outputs: dict[str, np.ndarray] | None,
        error: ConchError | None,
        final: bool,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        """One response of one request (on the loop); frames after its final are dropped."""
        open_ = self._open.get(request_id)
        if open_ is None:
            return
        request = open_.request
        arrived_ns = time.perf_counter_ns()
        if error is None and outputs:
            config = self._loaded.model.config
            try:
                produced = [
                    tensors.from_numpy(name, array, output_datatype(config, name))
                    for name, array in outputs.items()
                ]
            except (KeyError, ValueError) as exc:
                error = ConchError(
                    ErrorCode.INTERNAL, f"model '{config.name}' produced an unusable output: {exc}"
                )
        if error is not None:
            reply = envelope.error_reply(
                request.id, request.model, request.version, error.code.value, error.message
            )
            final = True
        else:
            reply = Reply(
                id=request.id,
                model=request.model,
                version=request.version,
                outputs=produced if outputs else [],
                worker=self._id,
                parameters=parameters or {},
            )
        self._outgoing.append(
            (
                request.reply_to,
                numbered(reply, open_.seq, final, self._id),
            )
        )
        output_ns = time.perf_counter_ns() - arrived_ns
        self._output_ns += output_ns
        infer_ns = arrived_ns - (open_.last_ns or self._started_ns)
        failed, cancelled = error is not None, final and open_.cancelled
        response_stats.frame(
            self._stats, open_.seq, infer_ns, output_ns, bool(outputs), failed, cancelled
        )
        open_.last_ns = time.perf_counter_ns()
        open_.seq += 1
        open_.last_ms = time.time() * 1000
        if final:
            del self._open[request_id]
            if open_.cancelled:
                self._stats["cancel_count"] += 1
            elif error is not None:
                self._stats["fail_count"] += 1
            else:
                self._stats["success_count"] += 1
        self._flush()
        if not self._open:
            self._all_done.set()

    def _end(self, request: InferRequest, code: ErrorCode, message: str, counter: str) -> None:
        """Answer a request that does not run."""
        reply = envelope.error_reply(request.id, request.model, request.version, code, message)
        self._outgoing.append((request.reply_to, numbered(reply, 0, True, self._id)))
        self._stats[counter] += 1

    def _flush(self) -> None:
        if self._outgoing and (self._flushing is None or self._flushing.done()):
            self._flushing = asyncio.create_task(self._publish())

    async def _publish(self) -> None:
        """Publish queued frames in order until none is left (one task at a time)."""
        while self._outgoing:
            frames, self._outgoing = self._outgoing, []
            while True:
                try:
                    async with self._redis.pipeline(transaction=False) as pipe:
                        queue_replies(pipe, frames)
                        await pipe.execute()
                    break
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.warning("could not publish response frames; retrying", exc_info=True)
                    await asyncio.sleep(0.2)

    async def _watch(self, model: str) -> None:
        """Until every request sent its final frame: cancels reach the model, deadlines end
        what is still open."""
        while self._open and not self._all_done.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._all_done.wait(), POLL_S)
            if self._open:
                await self._check_open(model)
        self._all_done.set()

    async def _finish(
        self, ran: list[ModelRequest], execution: Execution | None, watch: asyncio.Task[None]
    ) -> None:
        """Wait for every final frame, then ack."""
        config = self._loaded.model.config
        if not self._open:
            self._all_done.set()
        await watch
        while self._flushing is not None and not self._flushing.done():
            await self._flushing
        self._flush()
        if self._flushing is not None:
            await self._flushing
        stats = {k: v for k, v in self._stats.items() if v}
        if ran:
            size = sum(r.batch_size for r in ran)
            infer_ns = execution.compute_infer_ns if execution else 0
            stats.update(
                {
                    "execution_count": 1,
                    "inference_count": size,
                    "queue_ns": self._queue_ns,
                    "compute_input_ns": self._input_ns * len(ran),
                    "compute_infer_ns": infer_ns * len(ran),
                    "compute_output_ns": self._output_ns,
                    f"batch:{size}:count": 1,
                    f"batch:{size}:compute_input_ns": self._input_ns,
                    f"batch:{size}:compute_infer_ns": infer_ns,
                    f"batch:{size}:compute_output_ns": self._output_ns,
                }
            )
        await ack_streamed(self._redis, self._id, self._loaded, self._entry, stats)
        version = self._loaded.version
        if "execution_count" in stats:
            metrics.record_batch(config.name, version, stats)
        if stats.get("cancel_count"):
            metrics.record_failures(config.name, version, metrics.CANCELED, stats["cancel_count"])

    async def _check_open(self, model: str) -> None:
        """Tell the model about cancelled requests; end those past their deadline."""
        fresh = [rid for rid, o in self._open.items() if not o.cancelled]
        try:
            cancelled = await cancelled_ids(self._redis, model, fresh)
        except Exception:
            cancelled = set()
        now_ms = time.time() * 1000
        late = [rid for rid, o in self._open.items() if now_ms >= o.due_ms()]
        for request_id in cancelled:
            if (open_ := self._open.get(request_id)) is not None:
                open_.cancelled = True
        if cancelled or late:
            # A Python model's cancel is a pipe write that waits behind a batch being sent.
            await asyncio.to_thread(self._instance.cancel, sorted(cancelled | set(late)))
        for request_id in late:
            if (open_ := self._open.get(request_id)) is not None:
                self.frame(request_id, None, open_.late_error(now_ms), True)
