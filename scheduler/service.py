"""The scheduler service: reads every request stream, keeps one VersionQueue per model version.

One blocking XREADGROUP covers all request streams; entries go to their version's queue, whose
own task forms and dispatches batches. Several schedulers may run: the consumer group gives each
entry to one of them, and the entries of a scheduler that dies are reclaimed by a live one once
its heartbeat has expired.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from scheduler.settings import SchedulerSettings
from scheduler.version_queue import VersionQueue
from shared import (
    envelope,
    heartbeats,
    keys,
    metrics,
    model_registry,
    readiness,
    redis_conn,
    streams,
)
from shared.errors import ErrorCode
from shared.health_http import HealthServer
from shared.model_config import ModelConfig

log = logging.getLogger(__name__)


class SchedulerService:
    def __init__(self, settings: SchedulerSettings):
        self.settings = settings
        self.id = f"scheduler-{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.redis = redis_conn.connect(settings.redis_url, name="conch-scheduler")
        self.queues: dict[tuple[str, int], VersionQueue] = {}
        self._tasks: dict[tuple[str, int], asyncio.Task[None]] = {}
        # request stream key -> (model, version)
        self._streams: dict[bytes, tuple[str, int]] = {}
        self._rev = -1
        self._configs: dict[str, ModelConfig] = {}
        self._changed = asyncio.Event()
        self._background: set[asyncio.Task[None]] = set()
        self.ready = asyncio.Event()

    async def run(self) -> None:
        health = HealthServer(self.settings.health_host, self.settings.health_port, self.ready)
        metrics.on_scrape(self._export)
        await health.start()
        loops = [
            metrics.redis_rtt_probe(self.redis, "scheduler"),
            self._heartbeat_loop(),
            self._refresh_loop(),
            self._read_loop(),
            self._reclaim_loop(),
            self._done_loop(),
        ]
        try:
            await asyncio.gather(*loops)
        finally:
            for task in self._tasks.values():
                task.cancel()
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
            await health.stop()
            try:
                await heartbeats.deregister(self.redis, "scheduler", self.id)
            finally:
                await self.redis.aclose()

    async def _heartbeat_loop(self) -> None:
        s = self.settings
        info = {"pid": str(os.getpid()), "health_port": str(s.health_port)}
        while True:
            try:
                await heartbeats.heartbeat(
                    self.redis, "scheduler", self.id, info, s.heartbeat_ttl_ms
                )
            except Exception:
                metrics.record_heartbeat("scheduler", False)
                log.exception("scheduler heartbeat failed")
            else:
                metrics.record_heartbeat("scheduler", True)
            await asyncio.sleep(s.heartbeat_interval_ms / 1000)

    async def _refresh_loop(self) -> None:
        while True:
            try:
                await self._refresh()
                self.ready.set()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scheduler refresh failed")
            await asyncio.sleep(self.settings.refresh_interval_ms / 1000)

    async def _refresh(self) -> None:
        rev = int(await self.redis.get(keys.models_rev()) or 0)
        if rev != self._rev:
            self._rev, self._configs = await model_registry.read_models(self.redis)
        versions = await readiness.ready_versions(self.redis, list(self._configs))
        for model, config in self._configs.items():
            for version, instances in versions.get(model, {}).items():
                metrics.child(metrics.READY_INSTANCES, model, version).set(instances)
                if config.sequence_batching is None:  # sequences are queued by their holders
                    await self._ensure_queue(config, version, instances)

    def _export(self) -> None:
        for queue in list(self.queues.values()):
            queue.export()

    async def _ensure_queue(self, config: ModelConfig, version: int, instances: int) -> None:
        key = (config.name, version)
        queue = self.queues.get(key)
        if queue is None:
            request_streams = [
                keys.request_stream(config.name, version, level)
                for level in config.priority_levels()
            ]
            await streams.ensure_groups(self.redis, request_streams, keys.SCHEDULER_GROUP)
            await streams.ensure_group(
                self.redis, keys.batch_stream(config.name, version), keys.WORKER_GROUP
            )
            queue = VersionQueue(
                self.redis,
                config,
                version,
                self.settings.backlog_poll_us,
                self.settings.queued_batches_per_instance,
            )
            self.queues[key] = queue
            for stream in request_streams:
                self._streams[stream.encode()] = key
            self._tasks[key] = asyncio.create_task(queue.run(), name=f"queue-{key}")
            metrics.init_stage("scheduler", config.name, version)
            self._changed.set()
            log.info("scheduling model version", extra={"model": config.name, "version": version})
        queue.update(config, instances)

    async def _read_loop(self) -> None:
        client: aioredis.Redis = redis_conn.dedicated(
            self.settings.redis_url, name="conch-scheduler-read"
        )
        try:
            while True:
                if not self._streams:
                    self._changed.clear()
                    await self._changed.wait()
                    continue
                request = {stream: b">" for stream in self._streams}
                try:
                    reply = await client.xreadgroup(
                        keys.SCHEDULER_GROUP,
                        self.id,
                        request,
                        count=self.settings.read_count,
                        block=250,
                    )
                except asyncio.CancelledError:
                    raise
                except ResponseError as exc:
                    if "NOGROUP" not in str(exc):
                        log.exception("request stream read failed; retrying")
                        await asyncio.sleep(0.2)
                        continue
                    log.warning("request stream groups missing (redis restarted?); recreating")
                    try:
                        await streams.ensure_groups(
                            self.redis, [s.decode() for s in self._streams], keys.SCHEDULER_GROUP
                        )
                    except Exception as error:  # Redis still coming back: the next read retries
                        log.warning("could not recreate groups yet", extra={"error": str(error)})
                        await asyncio.sleep(0.2)
                    continue
                except Exception:
                    log.exception("request stream read failed; retrying")
                    await asyncio.sleep(0.2)
                    continue
                for entry in streams.parse_read(reply):
                    self._accept_safely(entry)
        finally:
            await client.aclose()

    def _accept_safely(self, entry: streams.Entry) -> None:
        """One malformed entry must not stop the read loop; it stays pending and is logged."""
        try:
            self._accept(entry)
        except Exception:
            log.exception("request entry rejected", extra={"stream": entry.stream.decode()})

    def _accept(self, entry: streams.Entry) -> None:
        key = self._streams.get(entry.stream)
        queue = self.queues.get(key) if key else None
        raw_header = entry.fields.get(keys.FIELD_HEADER)
        data = entry.fields.get(keys.FIELD_DATA)
        if queue is None or raw_header is None or data is None:
            log.error("malformed request entry", extra={"stream": entry.stream.decode()})
            return
        header = envelope.decode_header(raw_header)
        if entry.deliveries > 1:
            metrics.child(metrics.REDELIVERED, "scheduler", *key).inc()
        if entry.deliveries > self.settings.max_deliveries:
            task = asyncio.create_task(
                queue.answer_errors(
                    [(header, entry.stream, entry.entry_id)],
                    [
                        f"request was delivered {entry.deliveries - 1} times to schedulers that "
                        f"died; giving up after {self.settings.max_deliveries}"
                    ],
                    ErrorCode.INTERNAL,
                )
            )
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            return
        queue.add(header, entry.stream, entry.entry_id, data)

    async def _done_loop(self) -> None:
        """Workers announce finished batches: the held-back batch of that version may go."""
        client: aioredis.Redis = redis_conn.dedicated(
            self.settings.redis_url, name="conch-scheduler-done"
        )
        by_channel: dict[bytes, VersionQueue] = {}
        try:
            while True:
                try:
                    async with client.pubsub() as pubsub:
                        await pubsub.psubscribe(keys.BATCH_DONE_PATTERN)
                        async for message in pubsub.listen():
                            if message.get("type") != "pmessage":
                                continue
                            channel = message["channel"]
                            queue = by_channel.get(channel)
                            if queue is None:
                                by_channel = {
                                    keys.batch_done_channel(m, v).encode(): q
                                    for (m, v), q in self.queues.items()
                                }
                                queue = by_channel.get(channel)
                            if queue is not None:
                                queue.on_batch_done()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("batch-done subscription failed; resubscribing")
                    await asyncio.sleep(0.5)
        finally:
            await client.aclose()

    async def _reclaim_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.reclaim_interval_ms / 1000)
            try:
                live = await heartbeats.live_ids(self.redis, "scheduler")
                live.add(self.id)
                for stream in list(self._streams):
                    for entry in await streams.reclaim_dead(
                        self.redis, stream.decode(), keys.SCHEDULER_GROUP, self.id, live
                    ):
                        metrics.child(metrics.RECLAIMED, "scheduler", *self._streams[stream]).inc()
                        self._accept_safely(entry)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("reclaim failed")
