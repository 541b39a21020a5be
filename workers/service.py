"""The generic worker service: load a backend's models, pull batches, execute, publish replies.

Each execution instance has its own task and its own blocking read on the version's batch
stream, so an idle instance takes the next batch and a busy one takes nothing. A batch is acked
only after its replies are published; a worker that dies leaves the batch pending, and another
worker of the same version takes it over once the dead one's heartbeat has expired.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from shared import (
    envelope,
    keys,
    metrics,
    redis_conn,
    registry,
    repository,
    streams,
    tensors,
    tracing,
)
from shared.envelope import InferRequest, Reply, Timing
from shared.errors import ConchError, ErrorCode
from shared.health_http import HealthServer
from shared.publish import add_stats, queue_replies
from workers.backend import Backend, ModelInstance, ModelRequest
from workers.control import ModelControl
from workers.loader import LoadedVersion, load_version
from workers.registry import load_backend
from workers.settings import WorkerSettings

log = logging.getLogger(__name__)


class WorkerService:
    def __init__(self, settings: WorkerSettings, backend: Backend | None = None):
        self.settings = settings
        self.backend = backend or load_backend(settings.backend)
        self.id = (
            f"worker-{settings.backend}-{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        )
        self.redis = redis_conn.connect(settings.redis_url, name="conch-worker")
        self.loaded: dict[tuple[str, int], LoadedVersion] = {}
        self.ready = asyncio.Event()
        self._stopping = asyncio.Event()
        self._reclaimed: dict[tuple[str, int], asyncio.Queue[streams.Entry]] = {}
        self._executor: ThreadPoolExecutor | None = None
        # Serving tasks of every loaded version; versions loaded at runtime add theirs.
        self._serving: list[asyncio.Task[None]] = []
        self.control = ModelControl(self)
        self._exported: set[tuple[str, int]] = set()

    async def run(self) -> None:
        health = HealthServer(self.settings.health_host, self.settings.health_port, self.ready)
        await health.start()
        serving = self._serving
        background: list[asyncio.Task[None]] = []
        try:
            await self._load_all()
            total = sum(len(v.instances) for v in self.loaded.values())
            self._executor = ThreadPoolExecutor(  # headroom for versions loaded at runtime
                max_workers=max(64, total), thread_name_prefix="exec"
            )
            for key, loaded in self.loaded.items():
                self._reclaimed[key] = asyncio.Queue()
                for index, instance in enumerate(loaded.instances):
                    serving.append(
                        asyncio.create_task(
                            self._serve(loaded, instance, index), name=f"serve-{key}"
                        )
                    )
            await registry.heartbeat(self.redis, "worker", self.id, self._info(), self._ttl)
            await self._mark_ready()
            metrics.on_scrape(self._export_loaded)
            background = [
                asyncio.create_task(metrics.redis_rtt_probe(self.redis, "worker"), name="rtt"),
                asyncio.create_task(self._heartbeat_loop(), name="heartbeat"),
                asyncio.create_task(self._reclaim_loop(), name="reclaim"),
                asyncio.create_task(self.control.run(), name="model-control"),
            ]
            self.ready.set()
            log.info(
                "worker ready",
                extra={"worker": self.id, "models": [f"{m}:{v}" for m, v in self.loaded]},
            )
            await asyncio.gather(*background)
        finally:
            await self._shutdown(serving, background)
            await health.stop()

    @property
    def _ttl(self) -> int:
        return self.settings.heartbeat_ttl_ms

    def _info(self) -> dict[str, str]:
        return {
            "backend": self.settings.backend,
            "pid": str(os.getpid()),
            "health_port": str(self.settings.health_port),
            "models": ",".join(f"{m}:{v}" for m, v in self.loaded),
        }

    async def _load_all(self) -> None:
        scan = await self.control.startup_scan(repository.scan(self.settings.model_repository))
        for name, error in scan.errors.items():
            log.error("model not loadable", extra={"model": name, "error": error})
        wanted = set(self.settings.models)
        for name, model in scan.models.items():
            if (wanted and name not in wanted) or not self.backend.accepts(model.config):
                continue
            if not model.versions:
                log.error(
                    "model has no version to load",
                    extra={"model": name, "on_disk": model.available_versions},
                )
                continue
            for version in model.versions:
                log.info("loading model", extra={"model": name, "version": version})
                try:
                    loaded = await asyncio.to_thread(load_version, self.backend, model, version)
                except ConchError as exc:
                    log.error(
                        "model load failed",
                        extra={"model": name, "version": version, "error": exc.message},
                    )
                    continue
                except Exception as exc:
                    log.exception(
                        "model load failed",
                        extra={"model": name, "version": version, "error": str(exc)},
                    )
                    continue
                self.loaded[(name, version)] = loaded
                log.info(
                    "model loaded",
                    extra={
                        "model": name,
                        "version": version,
                        "instances": len(loaded.instances),
                        "seconds": round(loaded.load_seconds, 3),
                    },
                )
            if any(key[0] == name for key in self.loaded):
                await registry.publish_model(self.redis, model.config)
                await streams.ensure_groups(
                    self.redis,
                    [keys.batch_stream(name, v) for (m, v) in self.loaded if m == name],
                    keys.WORKER_GROUP,
                )

    async def _mark_ready(self) -> None:
        counts = {key: len(v.instances) for key, v in self.loaded.items()}
        await registry.mark_ready(self.redis, self.id, counts, self._ttl)

    async def _restore_after_redis_loss(self) -> None:
        """A Redis that restarted empty forgot the configs and the consumer groups: put back
        what this worker serves, so the mesh recovers without restarting anything."""
        configs = {v.model.config.name: v.model.config for v in self.loaded.values()}
        if await registry.ensure_published(self.redis, list(configs.values())):
            log.warning(
                "redis had lost the model registry; restored", extra={"models": list(configs)}
            )
            await streams.ensure_groups(
                self.redis, [keys.batch_stream(*key) for key in self.loaded], keys.WORKER_GROUP
            )

    async def _heartbeat_loop(self) -> None:
        while not self._stopping.is_set():
            await asyncio.sleep(self.settings.heartbeat_interval_ms / 1000)
            try:
                await registry.heartbeat(self.redis, "worker", self.id, self._info(), self._ttl)
                await self._mark_ready()
                await self._restore_after_redis_loss()
            except Exception:
                metrics.record_heartbeat("worker", False)
                log.exception("worker heartbeat failed")
            else:
                metrics.record_heartbeat("worker", True)

    def _export_loaded(self) -> None:
        """Scrape hook: loaded models (instances, load time) from ``self.loaded``, as it is now."""
        backend = self.settings.backend
        current = set(self.loaded)
        for (name, version), loaded in list(self.loaded.items()):
            if (name, version) not in self._exported:
                metrics.init_model(name, version)
                metrics.init_stage("worker", name, version)
            metrics.child(metrics.WORKER_INSTANCES, name, version, backend).set(
                len(loaded.instances)
            )
            metrics.child(metrics.LOAD_DURATION, name, version).set(loaded.load_seconds)
            metrics.child(metrics.EXECUTIONS_IN_FLIGHT, name, version)
        for name, version in self._exported - current:
            metrics.forget(metrics.WORKER_INSTANCES, name, version, backend)
            metrics.forget(metrics.LOAD_DURATION, name, version)
        self._exported = current

    async def _serve(self, loaded: LoadedVersion, instance: ModelInstance, index: int) -> None:
        key = (loaded.name, loaded.version)
        stream = keys.batch_stream(*key)
        consumer = self.id
        client: aioredis.Redis = redis_conn.dedicated(
            self.settings.redis_url, name="conch-worker-read"
        )
        reclaimed = self._reclaimed[key]
        try:
            while not self._stopping.is_set():
                if not reclaimed.empty():
                    await self._process_or_retry(
                        loaded, instance, reclaimed.get_nowait(), reclaimed
                    )
                    continue
                try:
                    reply = await client.xreadgroup(
                        keys.WORKER_GROUP, consumer, {stream: b">"}, count=1, block=500
                    )
                except asyncio.CancelledError:
                    raise
                except ResponseError as exc:
                    await self._recover_group(stream, exc)
                    continue
                except Exception:
                    log.exception("batch stream read failed; retrying")
                    await asyncio.sleep(0.2)
                    continue
                for entry in streams.parse_read(reply):
                    await self._process_or_retry(loaded, instance, entry, reclaimed)
        finally:
            await client.aclose()

    async def _process_or_retry(
        self,
        loaded: LoadedVersion,
        instance: ModelInstance,
        entry: streams.Entry,
        retry: asyncio.Queue[streams.Entry],
    ) -> None:
        """A batch whose processing failed (Redis gone mid-batch, say) stays pending in Redis;
        it is tried again here, counted as a delivery, so a poisonous one is answered with an
        error after max_deliveries instead of being retried forever."""
        try:
            await self._process(loaded, instance, entry)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("batch processing failed; trying it again", extra={"model": loaded.name})
            await asyncio.sleep(0.2)
            retry.put_nowait(dataclasses.replace(entry, deliveries=entry.deliveries + 1))

    async def _recover_group(self, stream: str, exc: ResponseError) -> None:
        """NOGROUP: Redis restarted empty; recreate the group. Never let the loop die of it."""
        if "NOGROUP" not in str(exc):
            log.error("batch stream read failed; retrying", extra={"error": str(exc)})
            await asyncio.sleep(0.2)
            return
        log.warning(
            "batch stream group missing (redis restarted?); recreating", extra={"stream": stream}
        )
        try:
            await streams.ensure_group(self.redis, stream, keys.WORKER_GROUP)
        except Exception as error:  # Redis still coming back: the next read retries
            log.warning("could not recreate the group yet", extra={"error": str(error)})
            await asyncio.sleep(0.2)

    async def _process(
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
            if entry.deliveries > self.settings.max_deliveries:
                replies.append(
                    (
                        request.reply_to,
                        self._error(
                            request,
                            ErrorCode.INTERNAL,
                            f"batch was delivered {entry.deliveries - 1} times to workers that "
                            f"died executing it; giving up after {self.settings.max_deliveries}",
                        ),
                    )
                )
            elif now_ms >= request.deadline_ms:
                replies.append(
                    (
                        request.reply_to,
                        self._error(
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
            given_up = entry.deliveries > self.settings.max_deliveries
            reason = metrics.OTHER if given_up else metrics.REJECTED
            metrics.record_failures(loaded.name, loaded.version, reason, unrun)
            stats["fail_count"] = stats.get("fail_count", 0) + unrun
        published_ns = time.time_ns()
        async with self.redis.pipeline(transaction=False) as pipe:
            queue_replies(pipe, replies)
            pipe.xack(entry.stream, keys.WORKER_GROUP, entry.entry_id)
            pipe.xdel(entry.stream, entry.entry_id)
            pipe.publish(keys.batch_done_channel(loaded.name, loaded.version), b"")
            if stats:
                add_stats(pipe, keys.stats(loaded.name, loaded.version), stats, int(now_ms))
            await pipe.execute()
        if tracing.ENABLED:
            _trace_requests("conch.worker.reply", enumerate(requests), published_ns, self.id)

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
                model_requests.append(
                    ModelRequest(
                        id=request.id,
                        inputs={t.name: tensors.to_numpy(t) for t in request.inputs},
                        requested_outputs=request.outputs or config.output_names,
                        parameters=request.parameters,
                    )
                )
                accepted.append((index, request))
            except ConchError as exc:
                replies.append((request.reply_to, self._error(request, exc.code, exc.message)))
        if not accepted:
            return replies
        loop = asyncio.get_running_loop()
        in_flight = metrics.child(metrics.EXECUTIONS_IN_FLIGHT, config.name, loaded.version)
        in_flight.inc()
        started_ns = time.time_ns()
        try:
            execution = await loop.run_in_executor(self._executor, instance.execute, model_requests)
        finally:
            in_flight.dec()
        if tracing.ENABLED:
            _trace_requests("conch.worker.execute", accepted, started_ns, self.id)
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
                reply = self._error(request, result.error.code, result.error.message)
            else:
                try:
                    outputs = [
                        tensors.from_numpy(name, result.outputs[name], _datatype(config, name))
                        for name in (request.outputs or config.output_names)
                    ]
                except (KeyError, ValueError) as exc:
                    reply = self._error(
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
                        worker=self.id,
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

    def _error(self, request: InferRequest, code: ErrorCode | str, message: str) -> Reply:
        return envelope.error_reply(
            request.id, request.model, request.version, ErrorCode(code).value, message
        )

    async def _reclaim_loop(self) -> None:
        while not self._stopping.is_set():
            await asyncio.sleep(self.settings.reclaim_interval_ms / 1000)
            try:
                live = await registry.live_ids(self.redis, "worker")
                live.add(self.id)
                for key in self.loaded:
                    for entry in await streams.reclaim_dead(
                        self.redis, keys.batch_stream(*key), keys.WORKER_GROUP, self.id, live
                    ):
                        metrics.child(metrics.RECLAIMED, "worker", *key).inc()
                        self._reclaimed[key].put_nowait(entry)
            except Exception:
                log.exception("reclaim failed")

    async def _shutdown(
        self, serving: list[asyncio.Task[None]], background: list[asyncio.Task[None]]
    ) -> None:
        """Stop taking batches, finish the ones in flight, then leave the registry."""
        self._stopping.set()
        self.ready.clear()
        for task in background:
            task.cancel()
        try:
            await registry.unmark_ready(self.redis, self.id, list(self.loaded))
        except Exception:
            log.exception("could not unmark readiness")
        if serving:
            _done, pending = await asyncio.wait(serving, timeout=self.settings.drain_timeout_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        try:
            await registry.deregister(self.redis, "worker", self.id)
        except Exception:
            log.exception("could not deregister")
        for loaded in self.loaded.values():
            for instance in loaded.instances:
                try:
                    instance.unload()
                except Exception:
                    log.exception("unload failed", extra={"model": loaded.name})
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        await self.redis.aclose()


def _trace_requests(name: str, requests, started_ns: int, worker: str) -> None:
    """One span per traced request of a batch, from ``started_ns`` to now."""
    ended_ns = time.time_ns()
    for _, request in requests:
        if request.trace:
            tracing.record(name, request.trace, started_ns, ended_ns, {"worker": worker})


def _datatype(config, name: str) -> str | None:
    spec = config.output(name)
    return spec.datatype if spec is not None else None
