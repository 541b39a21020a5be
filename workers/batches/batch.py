"""One batch of one version: decode it, answer what may not run, execute the rest, publish, ack.

A batch (the scheduler's, or one request admitted direct: ``shared.wire.batch_entry``) delivered too
often, or undecodable, is dead-lettered (``workers.batches.poison``). A request runs only before its
deadline and if not cancelled. Replies, then one fenced script (``shared.fleet.fencing``: still
ours? ack, count, announce) go out in one round trip; executions run on a pool, or inline when quick
(``workers.batches.executions``); ``wait_idle`` guards unloading.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis.asyncio as aioredis

from shared import metrics
from shared.fleet import streams
from shared.fleet.cancel_listener import CancelledRequests
from shared.metrics import response_stats
from shared.model_config import ModelConfig
from shared.runtime import tracing
from shared.wire import batch_entry, envelope, keys, sequence_params, tensors
from shared.wire.envelope import InferRequest, Reply, Timing
from shared.wire.errors import ConchError, ErrorCode
from workers.backend import ModelInstance, ModelRequest, ModelResult
from workers.batches import poison, ragged
from workers.batches.batch_outcome import Outcome
from workers.batches.cancel_check import drop_cancelled
from workers.batches.executions import Executions, inline_bound_us
from workers.batches.running_cancels import run_watched, tells_cancels
from workers.batches.stream_batch import StreamBatch
from workers.batches.stream_sink import output_datatype
from workers.loading.loader import LoadedVersion
from workers.settings import WorkerSettings

log = logging.getLogger(__name__)


class BatchProcessor:
    def __init__(self, redis: aioredis.Redis, settings: WorkerSettings, worker_id: str):
        self._redis = redis
        self._settings = settings
        self._id = worker_id
        self.executions = Executions(inline_bound_us(settings.inline_execution_us))
        self.cancelled = CancelledRequests()  # as announced (``shared.fleet.cancel_listener``)

    @property
    def executor(self) -> ThreadPoolExecutor | None:
        """Set by the service once the start-up versions are loaded (sized by their instances)."""
        return self.executions.pool

    @executor.setter
    def executor(self, pool: ThreadPoolExecutor | None) -> None:
        self.executions.pool = pool

    async def wait_idle(
        self, instances: list[ModelInstance], timeout_s: float | None = None
    ) -> list[ModelInstance]:
        """Wait until none of these instances executes; returns those still executing when
        ``timeout_s`` ran out (a cancelled serving task leaves its execution running)."""
        return await self.executions.wait_idle(instances, timeout_s)

    async def _still_ours(self, entry: streams.Entry) -> bool:
        """One XPENDING, for redeliveries only (the first delivery is ours by the read)."""
        rows = await self._redis.xpending_range(
            entry.stream, keys.WORKER_GROUP, entry.entry_id, entry.entry_id, 1, self._id
        )
        return bool(rows)

    async def process(
        self,
        loaded: LoadedVersion,
        instance: ModelInstance,
        entry: streams.Entry,
        defer: bool = False,
    ) -> asyncio.Task[None] | Outcome | None:
        """For a decoupled model: returns once ``execute`` did, with the task that finishes its
        streams and acks the batch (``workers.batches.stream_batch``). ``defer``: an ordinary
        batch's replies and ack are returned unsent (``workers.batches.batch_outcome``), for the
        caller to send with its next read."""
        name, version = loaded.name, loaded.version
        if entry.deliveries > self._settings.max_deliveries:
            await poison.dead_letter(
                self._redis,
                name,
                version,
                entry,
                self._id,
                f"batch was delivered {entry.deliveries - 1} times to workers that failed or "
                f"died executing it; giving up after {self._settings.max_deliveries}",
            )
            return None
        if entry.deliveries > 1 and not await self._still_ours(entry):
            # Tried again after a failure whose write had gone through (acked already), or
            # claimed by another worker meanwhile: running it again would run it twice.
            metrics.record_late_result("worker", name, version)
            return None
        try:
            batch = batch_entry.decode(entry.fields, entry.entry_id, name, version)
            requests = [envelope.decode_request(raw) for raw in batch.requests]
        except Exception:
            log.exception(
                "undecodable batch", extra={"model": name, "entry": entry.entry_id.decode()}
            )
            await poison.dead_letter(
                self._redis, name, version, entry, self._id, "batch could not be decoded"
            )
            return None
        if entry.deliveries > 1:
            metrics.child(metrics.REDELIVERED, "worker", name, version).inc()
        if loaded.model.config.decoupled:
            streaming = StreamBatch(self._redis, self._id, loaded, instance, entry)
            return await streaming.start(requests, batch.queue_ns, self._submit)
        now_ms = time.time() * 1000
        replies: list[tuple[str, Reply]] = []
        runnable: list[tuple[int, InferRequest]] = []
        for index, request in enumerate(requests):
            if now_ms >= request.deadline_ms:
                replies.append((request.reply_to, _error(request, ErrorCode.UNAVAILABLE, EXPIRED)))
            else:
                runnable.append((index, request))
        stats: dict[str, int] = {}
        runnable = await drop_cancelled(
            self._redis, name, now_ms, runnable, replies, stats, self.cancelled
        )
        unrun = len(requests) - len(runnable) - stats.get("cancel_count", 0)
        if runnable:
            replies.extend(await self._execute(loaded, instance, batch.queue_ns, runnable, stats))
        if unrun:  # expired: failures, as Triton counts them (and the stats hash)
            stats["fail_count"] = stats.get("fail_count", 0) + unrun
        outcome = Outcome(
            entry=entry,
            model=name,
            version=version,
            worker=self._id,
            replies=replies,
            stats=stats,
            now_ms=now_ms,
            requests=requests,
            unrun=unrun,
            ran=bool(runnable),
        )
        if (level := batch_entry.direct_priority(entry.fields)) is not None:
            outcome.direct_level, outcome.direct_queue_ns = level, batch.queue_ns[0]
        if defer:
            return outcome
        await self.send(outcome)
        return None

    async def send(self, outcome: Outcome) -> bool:
        """Replies and fenced ack alone, through the pool (``Outcome.send``)."""
        return await outcome.send(self._redis, self._settings.dead_bound_ms / 1000)

    async def _submit(self, instance: ModelInstance, run: Any, *args: Any) -> Any:
        """Run ``run(*args)`` on the pool, tracked as this instance's execution."""
        return await self.executions.run(instance, run, *args)

    async def _execute(
        self,
        loaded: LoadedVersion,
        instance: ModelInstance,
        queue_ns: list[int],
        runnable: list[tuple[int, InferRequest]],
        stats: dict[str, int],
    ) -> list[tuple[str, Reply]]:
        config = loaded.model.config
        model_requests: list[ModelRequest] = []
        replies: list[tuple[str, Reply]] = []
        accepted: list[tuple[int, InferRequest]] = []
        # compute_input as Triton defines it: preparing the input tensors for the model (here
        # from the wire form), plus what the backend itself spends (a batch's concatenation).
        input_started = time.perf_counter_ns()
        for index, request in runnable:
            try:
                sequence = sequence_params.lenient(request.parameters)
                model_requests.append(
                    ModelRequest(
                        id=request.id,
                        inputs={t.name: tensors.to_numpy(t) for t in request.inputs},
                        requested_outputs=request.outputs or config.output_names,
                        parameters=request.parameters,
                        correlation_id=sequence.id,
                        flags=sequence.flags,
                        deadline_ms=request.deadline_ms,
                        priority=request.priority,
                        tenant=request.tenant,
                    )
                )
                accepted.append((index, request))
            except ConchError as exc:
                replies.append((request.reply_to, _error(request, exc.code, exc.message)))
        if not accepted:
            return replies
        ragged.add_batch_inputs(config, model_requests)
        input_ns = time.perf_counter_ns() - input_started
        in_flight = metrics.child(metrics.EXECUTIONS_IN_FLIGHT, config.name, loaded.version)
        done = loaded.executing(in_flight)  # also the version's own count, for eviction
        started_ns = time.time_ns()
        running: Awaitable[Any] = self.executions.run(
            instance, instance.execute, model_requests, on_done=done, timed=True
        )
        if tells_cancels(instance):  # is_cancelled() reaches the running models
            watch = run_watched(self._redis, config.name, model_requests, self.cancelled, instance)
            running = watch(asyncio.ensure_future(running))
        execution = await running
        if tracing.ENABLED:
            _trace_requests("conch.worker.execute", accepted, started_ns, self._id)
        batch_size = sum(r.batch_size for r in model_requests)
        # compute_output: extracting the outputs (into the wire form) plus the backend's split.
        output_started = time.perf_counter_ns()
        produced: list[list[Any] | Reply] = []
        for (_, request), result in zip(accepted, execution.results, strict=True):
            produced.append(_wire_outputs(config, request, result))
        input_ns += execution.compute_input_ns
        output_ns = execution.compute_output_ns + time.perf_counter_ns() - output_started
        infer_ns = execution.compute_infer_ns
        successes = 0
        for (index, request), outputs, result in zip(
            accepted, produced, execution.results, strict=True
        ):
            timing = Timing(
                queue_ns=queue_ns[index] if index < len(queue_ns) else 0,
                compute_input_ns=input_ns,
                compute_infer_ns=infer_ns,
                compute_output_ns=output_ns,
                batch_size=batch_size,
            )
            if isinstance(outputs, Reply):
                reply = outputs
            else:
                successes += 1
                reply = Reply(
                    id=request.id,
                    model=config.name,
                    version=loaded.version,
                    outputs=outputs,
                    timing=timing,
                    worker=self._id,
                    parameters=result.parameters,
                )
            response_stats.computed(stats, 0, infer_ns, output_ns, ok=not reply.error_code)
            replies.append((request.reply_to, reply))
        stats.update(
            {
                "execution_count": 1,
                "inference_count": batch_size,
                "success_count": successes,
                "fail_count": len(accepted) - successes,
                "queue_ns": sum(queue_ns[i] for i, _ in accepted if i < len(queue_ns)),
                # Per request, as Triton counts them: each request spent the batch's duration.
                "compute_input_ns": input_ns * len(accepted),
                "compute_infer_ns": infer_ns * len(accepted),
                "compute_output_ns": output_ns * len(accepted),
                f"batch:{batch_size}:count": 1,
                f"batch:{batch_size}:compute_input_ns": input_ns,
                f"batch:{batch_size}:compute_infer_ns": infer_ns,
                f"batch:{batch_size}:compute_output_ns": output_ns,
            }
        )
        return replies


EXPIRED = "Request timeout expired: the deadline passed before execution"


def _error(request: InferRequest, code: ErrorCode | str, message: str) -> Reply:
    return envelope.error_reply(
        request.id, request.model, request.version, ErrorCode(code).value, message
    )


def _trace_requests(
    name: str, requests: Iterable[tuple[int, InferRequest]], started_ns: int, worker: str
) -> None:
    """One span per traced request of a batch, from ``started_ns`` to now."""
    ended_ns = time.time_ns()
    for _, request in requests:
        if request.trace:
            tracing.record(name, request.trace, started_ns, ended_ns, {"worker": worker})


def _wire_outputs(
    config: ModelConfig, request: InferRequest, result: ModelResult
) -> list[Any] | Reply:
    """A request's outputs in the wire form, or the error reply that replaces them."""
    if result.error is not None:
        return _error(request, result.error.code, result.error.message)
    try:
        return [
            tensors.from_numpy(name, result.outputs[name], output_datatype(config, name))
            for name in (request.outputs or config.output_names)
        ]
    except (KeyError, ValueError) as exc:
        message = f"model '{config.name}' produced an unusable output: {exc}"
        return _error(request, ErrorCode.INTERNAL, message)
