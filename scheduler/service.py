"""The scheduler service: reads every request stream, keeps one VersionQueue per model version.

One blocking XREADGROUP covers all request streams; entries go to their version's queue, whose
own task forms and dispatches batches. Several schedulers may run: the consumer group gives each
entry to one of them, and the entries of a scheduler that dies are reclaimed by a live one once
its heartbeat is older than the dead bound (heartbeats run on a thread of their own, so a busy
event loop never looks dead). After a failed read or step a scheduler recovers its own pending
entries (``scheduler.reading.own_pending``); entries it cannot queue are answered and dead-lettered
(``scheduler.queueing.poison``); the queues of versions no longer served are retired.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import Callable

import redis.asyncio as aioredis

from scheduler.ensemble.host import EnsembleHost
from scheduler.ensemble.runner import EnsembleRunner
from scheduler.placement import fleet_view
from scheduler.placement.placer import Placer
from scheduler.queueing.cancels import SchedulerCancels
from scheduler.queueing.version_queue import VersionQueue
from scheduler.reading.intake import Intake
from scheduler.reading.reclaim import reclaim_loop
from scheduler.settings import SchedulerSettings
from shared import metrics
from shared.fleet import (
    change_feed,
    control,
    durability,
    heartbeats,
    log_settings,
    model_registry,
    readiness,
    streams,
)
from shared.fleet.heartbeat_thread import HeartbeatThread
from shared.model_config import ModelConfig
from shared.model_config.ensemble_graph import is_ensemble
from shared.runtime import redis_conn, subscription
from shared.runtime.health_http import HealthServer
from shared.wire import keys

log = logging.getLogger(__name__)


class SchedulerService:
    def __init__(self, settings: SchedulerSettings):
        self.settings = settings
        self.id = f"scheduler-{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.redis = redis_conn.connect(settings.redis_url, name="conch-scheduler")
        durability.configure(
            self.redis, settings.redis_wait_replicas, settings.redis_wait_timeout_ms
        )
        self.queues: dict[tuple[str, int], VersionQueue | EnsembleRunner] = {}
        self._tasks: dict[tuple[str, int], asyncio.Task[None]] = {}
        # request stream key -> (model, version)
        self._streams: dict[bytes, tuple[str, int]] = {}
        self._rev = -1
        self._configs: dict[str, ModelConfig] = {}
        self._versions: dict[str, dict[int, int]] = {}  # model -> version -> live instances
        self._changed = asyncio.Event()
        # (model, version) -> when its version was first seen gone (monotonic s).
        self._absent: dict[tuple[str, int], float] = {}
        self.ready = asyncio.Event()
        self.intake = Intake(
            self.redis, settings, self.id, self.queues, self._streams, self._changed
        )
        self.cancels = SchedulerCancels(self.queues)
        self.ensembles = EnsembleHost(self.redis, settings, self.id, self.intake.need_recovery)
        s = settings
        self.heartbeat = HeartbeatThread(
            s.redis_url,
            "scheduler",
            self.id,
            ttl_ms=s.heartbeat_ttl_ms,
            interval_ms=s.heartbeat_interval_ms,
            info=self._heartbeat_info,
            extra=self.ensembles.queue_marks,
        )
        # Registry and readiness changes are announced; the refresh interval is the safety poll.
        self.feed = change_feed.ChangeFeed(
            s.redis_url, s.refresh_interval_ms / 1000, name="conch-scheduler-changes"
        )
        self.feed.on(change_feed.MODELS, self._refresh_once)
        self.feed.on_names(change_feed.MODELS, self._refresh)
        # on_demand: this scheduler may be the placer (one at a time, by lease).
        self.placer: Placer | None = None
        if s.model_control_mode == control.MODE_ON_DEMAND:
            self.placer = Placer(self.redis, s, self.id)
            self.feed.on(change_feed.DEMAND, self.placer.on_demand_notice)

    def _heartbeat_info(self) -> dict[str, str]:
        """Heartbeat thread's info; on_demand: requests waiting per model (the placer's copies)."""
        info = {"pid": str(os.getpid()), "health_port": str(self.settings.health_port)}
        if self.placer is not None:
            info[fleet_view.BACKLOG_FIELD] = fleet_view.backlog_info(self.queues)
        return info

    async def run(self) -> None:
        health = HealthServer(
            self.settings.health_host,
            self.settings.health_port,
            self.ready,
            setting="CONCH_SCHEDULER_HEALTH_PORT",
        )
        metrics.on_scrape(self._export)
        await health.start()
        self.heartbeat.start()
        loops = [
            metrics.redis_rtt_probe(self.redis, "scheduler"),
            self.feed.run(),
            self.intake.run(),
            self._reclaim_loop(),
            self._done_loop(),
            self.cancels.run(self.settings.redis_url),
            log_settings.follow(self.settings.redis_url),
        ]
        if self.placer is not None:
            loops.append(self.placer.run())
        try:
            await asyncio.gather(*loops)
        finally:
            for task in self._tasks.values():
                task.cancel()
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
            await health.stop()
            await asyncio.to_thread(self.heartbeat.stop)
            await self.ensembles.unmark(self.queues)
            try:
                await heartbeats.deregister(self.redis, "scheduler", self.id)
            finally:
                await self.redis.aclose()

    async def _refresh_once(self) -> None:
        await self._refresh()
        self.ready.set()
        if self._absent:  # a version gone from the fleet is retired after a delay: look again
            self.feed.kick_after(self.settings.retire_after_ms / 1000, change_feed.MODELS)

    async def _refresh(self, names: set[str] | None = None) -> None:
        """Every model, or (``names``: a notice named them) only those, and the ensembles."""
        if names is None:
            rev = int(await self.redis.get(keys.models_rev()) or 0)
            if rev != self._rev:
                self._rev, self._configs = await model_registry.read_models(self.redis)
            self._versions = await readiness.ready_versions(self.redis, list(self._configs))
        else:
            self._configs.update(await model_registry.read_configs(self.redis, sorted(names)))
            named = [name for name in sorted(names) if name in self._configs]
            self._versions.update(await readiness.ready_versions(self.redis, named))
        versions = self._versions
        await self.ensembles.observe(self._configs, versions)
        for model, config in self._configs.items():
            if is_ensemble(config):  # run here, ready while their composing models are
                for version in versions.get(model, {}):
                    await self._add_queue(config, version, self.ensembles.runner(config, version))
                await self.ensembles.mark(config, versions.get(model, {}))
                continue
            if names is not None and model not in names:
                continue
            for version, instances in versions.get(model, {}).items():
                metrics.child(metrics.READY_INSTANCES, model, version).set(instances)
                if config.sequence_batching is None:  # sequences are queued by their holders
                    await self._ensure_queue(config, version, instances)
        if names is None:  # retired on full re-reads only: a version set is never partly read
            await self._retire_unserved({(m, v) for m, found in versions.items() for v in found})

    async def _retire_unserved(self, served: set[tuple[str, int]]) -> None:
        """Queues of versions gone from the fleet (unloaded: no longer in the model's version
        set) for ``retire_after_ms`` are removed, with their read streams; what they still hold
        is answered with an error. The delay rides out a Redis that restarted empty, whose
        version sets the workers' heartbeats restore within a second."""
        now = time.monotonic()
        for key in list(self.queues):
            if key in served:
                self._absent.pop(key, None)
                continue
            since = self._absent.setdefault(key, now)
            if now - since >= self.settings.retire_after_ms / 1000:
                await self._retire(key)

    async def _retire(self, key: tuple[str, int]) -> None:
        """Stop the queue, answer what it holds, then forget it and its streams. If the answer
        cannot be written the queue is started again and kept: what it holds stays its own."""
        queue, task = self.queues[key], self._tasks[key]
        while not task.done():  # a cancellation may be swallowed inside redis-py (gh-86296)
            task.cancel()
            await asyncio.wait({task}, timeout=0.05)
        model, version = key
        try:
            while len(queue):  # what the intake handed it meanwhile too
                await queue.retire(f"model '{model}' version {version} is no longer served")
        except Exception:
            self._tasks[key] = asyncio.create_task(queue.run(), name=f"queue-{key}")
            raise
        del self.queues[key], self._tasks[key]
        for stream in [s for s, k in self._streams.items() if k == key]:
            del self._streams[stream]
        self._absent.pop(key, None)
        self._changed.set()
        log.info("stopped scheduling model version", extra={"model": model, "version": version})

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
                consumer=self.id,
                on_failure=self.intake.need_recovery,
            )
            queue.was_cancelled = self.cancels.attach()
            self.queues[key] = queue
            for stream in request_streams:
                self._streams[stream.encode()] = key
            self._tasks[key] = asyncio.create_task(queue.run(), name=f"queue-{key}")
            metrics.init_stage("scheduler", config.name, version)
            self._changed.set()
            log.info("scheduling model version", extra={"model": config.name, "version": version})
        queue.update(config, instances)

    async def _add_queue(
        self, config: ModelConfig, version: int, make: Callable[[], EnsembleRunner]
    ) -> None:
        """An ensemble's runner, registered with its request streams and its step stream."""
        key = (config.name, version)
        runner = self.queues.get(key)
        if runner is None:
            runner = make()
            request_streams = [
                keys.request_stream(config.name, version, level)
                for level in config.priority_levels()
            ]
            read = [*request_streams, keys.ensemble_steps(config.name, version)]
            await streams.ensure_groups(self.redis, read, keys.SCHEDULER_GROUP)
            self.queues[key] = runner
            for stream in read:
                self._streams[stream.encode()] = key
            self._tasks[key] = asyncio.create_task(runner.run(), name=f"ensemble-{key}")
            metrics.init_stage("scheduler", config.name, version)
            metrics.init_model(config.name, version)
            self._changed.set()
            log.info("running ensemble version", extra={"model": config.name, "version": version})
        runner.update(config, 1)

    async def _done_loop(self) -> None:
        """Workers announce finished batches: the held-back batch of that version may go."""
        client: aioredis.Redis = redis_conn.dedicated(
            self.settings.redis_url, name="conch-scheduler-done"
        )
        by_channel: dict[bytes, VersionQueue | EnsembleRunner] = {}
        try:
            while True:
                try:
                    async with await redis_conn.pubsub(client) as pubsub:
                        await pubsub.psubscribe(keys.BATCH_DONE_PATTERN)
                        async for message in subscription.published(pubsub):
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
        await reclaim_loop(self.redis, self.settings, self.id, self._streams, self.intake)
