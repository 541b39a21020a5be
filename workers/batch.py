"""One batch of one version: decode it, answer what may not run, execute the rest, publish, ack.

A request runs only if the batch has not been delivered more than ``max_deliveries`` times and
its deadline has not passed; the others are answered with an error and counted as failures, as
Triton counts them. The replies, the ack and delete of the batch entry, the batch-done
announcement the scheduler waits for and the stats increment go out in one pipeline after
execution: a batch is acked only once its replies are published.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

import redis.asyncio as aioredis

from shared import envelope, keys, metrics, sequence_params, streams, tensors, tracing
from shared.envelope import InferRequest, Reply, Timing
from shared.errors import ConchError, ErrorCode
from shared.model_config import ModelConfig
from shared.publish import add_stats, queue_replies
from workers.backend import ModelInstance, ModelRequest
from workers.loader import LoadedVersion
from workers.settings import WorkerSettings


class BatchProcessor:
    def __init__(self, redis: aioredis.Redis, settings: WorkerSettings, worker_id: str):
        self._redis = redis
        self._settings = settings
        self._id = worker_id
        # Set by the service once the start-up versions are loaded (sized by their instances).
        self.executor: ThreadPoolExecutor | None = None

    async def process(
        self, loaded: LoadedVersion, instance: ModelInstance, entry: streams.Entry
    ) -> None:
        batch = envelope.decode_batch(entry.fields[keys.FIELD_DATA])
        requests = [envelope.decode_request(raw) for raw in batch.requests]
        now_ms = time.time() * 1000
        replies: list[tuple[str, Reply]] = []
        runnable: list[tuple[int, InferRequest]] = []
        if entry.deliveries > 1:
            metrics.child(metrics.REDELIVERED, "worker", loaded.name, loaded.version).inc()
        for index, request in enumerate(requests):
            if entry.deliveries > self._settings.max_deliveries:
                replies.append(
                    (
                        request.reply_to,
                        _error(
                            request,
                            ErrorCode.INTERNAL,
                            f"batch was delivered {entry.deliveries - 1} times to workers that "
                            f"died executing it; giving up after {self._settings.max_deliveries}",
                        ),
                    )
                )
            elif now_ms >= request.deadline_ms:
                replies.append(
                    (
                        request.reply_to,
                        _error(
                            request,
                            ErrorCode.UNAVAILABLE,
                            "Request timeout expired: the deadline passed before execution",
                        ),
                    )
                )
            else:
                runnable.append((index, request))
        stats: dict[str, int] = {}
        unrun = len(requests) - len(runnable)
        if runnable:
            replies.extend(await self._execute(loaded, instance, batch.queue_ns, runnable, stats))
            metrics.record_batch(loaded.name, loaded.version, stats)
        if unrun:  # expired or given up: failures, as Triton counts them (and the stats hash)
            given_up = entry.deliveries > self._settings.max_deliveries
            reason = metrics.OTHER if given_up else metrics.REJECTED
            metrics.record_failures(loaded.name, loaded.version, reason, unrun)
            stats["fail_count"] = stats.get("fail_count", 0) + unrun
        published_ns = time.time_ns()
        async with self._redis.pipeline(transaction=False) as pipe:
            queue_replies(pipe, replies)
            pipe.xack(entry.stream, keys.WORKER_GROUP, entry.entry_id)
            pipe.xdel(entry.stream, entry.entry_id)
            pipe.publish(keys.batch_done_channel(loaded.name, loaded.version), b"")
            if stats:
                add_stats(pipe, keys.stats(loaded.name, loaded.version), stats, int(now_ms))
            await pipe.execute()
        if tracing.ENABLED:
            _trace_requests("conch.worker.reply", enumerate(requests), published_ns, self._id)

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
                    )
                )
                accepted.append((index, request))
            except ConchError as exc:
                replies.append((request.reply_to, _error(request, exc.code, exc.message)))
        if not accepted:
            return replies
        loop = asyncio.get_running_loop()
        in_flight = metrics.child(metrics.EXECUTIONS_IN_FLIGHT, config.name, loaded.version)
        in_flight.inc()
        started_ns = time.time_ns()
        try:
            execution = await loop.run_in_executor(self.executor, instance.execute, model_requests)
        finally:
            in_flight.dec()
        if tracing.ENABLED:
            _trace_requests("conch.worker.execute", accepted, started_ns, self._id)
        batch_size = sum(r.batch_size for r in model_requests)
        successes = 0
        for (index, request), result in zip(accepted, execution.results, strict=True):
            timing = Timing(
                queue_ns=queue_ns[index] if index < len(queue_ns) else 0,
                compute_input_ns=execution.compute_input_ns,
                compute_infer_ns=execution.compute_infer_ns,
                compute_output_ns=execution.compute_output_ns,
                batch_size=batch_size,
            )
            if result.error is not None:
                reply = _error(request, result.error.code, result.error.message)
            else:
                try:
                    outputs = [
                        tensors.from_numpy(name, result.outputs[name], _datatype(config, name))
                        for name in (request.outputs or config.output_names)
                    ]
                except (KeyError, ValueError) as exc:
                    reply = _error(
                        request,
                        ErrorCode.INTERNAL,
                        f"model '{config.name}' produced an unusable output: {exc}",
                    )
                else:
                    successes += 1
                    reply = Reply(
                        id=request.id,
                        model=config.name,
                        version=loaded.version,
                        outputs=outputs,
                        timing=timing,
                        worker=self._id,
                    )
            replies.append((request.reply_to, reply))
        stats.update(
            {
                "execution_count": 1,
                "inference_count": batch_size,
                "success_count": successes,
                "fail_count": len(accepted) - successes,
                "queue_ns": sum(queue_ns[i] for i, _ in accepted if i < len(queue_ns)),
                # Per request, as Triton counts them: each request spent the batch's duration.
                "compute_input_ns": execution.compute_input_ns * len(accepted),
                "compute_infer_ns": execution.compute_infer_ns * len(accepted),
                "compute_output_ns": execution.compute_output_ns * len(accepted),
                f"batch:{batch_size}:count": 1,
                f"batch:{batch_size}:compute_input_ns": execution.compute_input_ns,
                f"batch:{batch_size}:compute_infer_ns": execution.compute_infer_ns,
                f"batch:{batch_size}:compute_output_ns": execution.compute_output_ns,
            }
        )
        return replies


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


def _datatype(config: ModelConfig, name: str) -> str | None:
    spec = config.output(name)
    return spec.datatype if spec is not None else None
