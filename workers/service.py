"""The generic worker service: start up, serve one backend's models, shut down cleanly.

Start-up reads the model repositories (``shared.storage.repositories``: one or several, the
local copies of remote ones brought up to date first) and loads what they hold; in explicit
model control mode, what LOAD_MODELS and the fleet's desired state select
(``workers.loading.fleet_state``, ``workers.loading.startup``). Then it serves them
(``workers.loading.version_host``: one serving loop per instance, ``workers.batches.batch_loop``)
and marks them ready. While it runs, the heartbeat, the takeover of dead workers' batches and
fleet control (load and unload while serving) run beside the serving loops; in poll mode, so
does the repository poll (``workers.loading.poll``). Shutdown stops taking batches, finishes the
ones in flight, then deregisters."""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from concurrent.futures import ThreadPoolExecutor

from shared import metrics
from shared.fleet import cancel_listener, control, heartbeats, log_settings, on_demand, readiness
from shared.metrics.on_demand import MODEL_LOADS
from shared.runtime import redis_conn
from shared.runtime.health_http import HealthServer
from workers.backend import Backend, ModelInstance
from workers.backend_table import load_backend
from workers.batches.batch import BatchProcessor
from workers.batches.batch_loop import BatchLoop
from workers.batches.lane import Lane
from workers.batches.reclaim import reclaim_loop
from workers.heartbeat import restore_loop
from workers.loaded_metrics import LoadedVersionMetrics
from workers.loading.control import ModelControl
from workers.loading.loader import LoadedVersion
from workers.loading.poll import RepositoryPoll
from workers.loading.startup import load_at_startup
from workers.loading.version_host import VersionHost
from workers.ratelimit.gate import RateGate
from workers.sequence.adoption import adoption_loop
from workers.sequence.serving import SequenceServing
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
        self.ready = asyncio.Event()
        self._stopping = asyncio.Event()
        self._batches = BatchProcessor(self.redis, settings, self.id)
        gate = RateGate(self.redis, settings, self.id)
        loop = BatchLoop(self.redis, settings, self.id, self._stopping, self._batches, gate)
        sequences = SequenceServing(
            self.redis,
            settings,
            self.id,
            self._stopping,
            lambda: self._batches.executor,
            self._batches.cancelled,
        )

        async def serve(loaded: LoadedVersion, instance: ModelInstance, lane: Lane) -> None:
            if loaded.model.config.sequence_batching is not None:  # the instance holds sequences
                await sequences.serve(loaded, instance, lane.stop)
            else:
                await loop.serve(loaded, instance, lane)

        async def wait_idle(
            instances: list[ModelInstance], timeout_s: float | None = None
        ) -> list[ModelInstance]:
            # A version's instances are all sequence holders or none: one of these returns at once.
            busy = await self._batches.wait_idle(instances, timeout_s)
            return busy + await sequences.wait_idle(instances, timeout_s)

        self.versions = VersionHost(self.redis, settings, self.backend, self.id, serve, wait_idle)
        self.control = ModelControl(self.versions, self.versions.residents)

    async def run(self) -> None:
        health = HealthServer(
            self.settings.health_host,
            self.settings.health_port,
            self.ready,
            setting="CONCH_WORKER_HEALTH_PORT (conch worker --health-port)",
        )
        await health.start()
        versions = self.versions
        background: list[asyncio.Task[None]] = []
        try:
            settings = self.settings
            repositories = versions.repositories
            await asyncio.to_thread(repositories.refresh)
            poll = None
            if settings.model_control_mode == control.MODE_POLL:
                poll = RepositoryPoll(versions, self._stopping)
                await poll.baseline()
            found = await asyncio.to_thread(repositories.scan, not settings.strict_model_config)
            scan = await self.control.startup_scan(
                found,
                repositories.upload_root,
                settings.model_control_mode,
                settings.load_models,
                settings.model_config_name,
            )
            await load_at_startup(scan, versions)
            if versions.residents.on_demand:
                await self._pin_startup_models()
            total = sum(len(v.instances) for v in versions.loaded.values())
            self._batches.executor = ThreadPoolExecutor(  # headroom for versions loaded at runtime
                max_workers=max(64, total), thread_name_prefix="exec"
            )
            cancels = asyncio.create_task(
                cancel_listener.follow(self.settings.redis_url, self._batches.cancelled),
                name="cancels",
            )
            for version in list(versions.loaded.values()):
                versions.serve(version)
            await versions.announce()
            versions.heartbeats.start()
            metrics.on_scrape(LoadedVersionMetrics(self.settings.backend, versions.loaded).export)
            background = [
                asyncio.create_task(metrics.redis_rtt_probe(self.redis, "worker"), name="rtt"),
                asyncio.create_task(restore_loop(versions, self._stopping), name="restore"),
                asyncio.create_task(reclaim_loop(versions, self._stopping), name="reclaim"),
                asyncio.create_task(adoption_loop(versions, self._stopping), name="adoption"),
                asyncio.create_task(self.control.run(), name="model-control"),
                asyncio.create_task(
                    log_settings.follow(self.settings.redis_url), name="log-settings"
                ),
                cancels,
            ]
            if poll is not None:
                background.append(asyncio.create_task(poll.run(), name="repository-poll"))
            self.ready.set()
            log.info(
                "worker ready",
                extra={"worker": self.id, "models": [f"{m}:{v}" for m, v in versions.loaded]},
            )
            await asyncio.gather(*background)
        finally:
            await self._shutdown(background)
            await health.stop()

    async def _pin_startup_models(self) -> None:
        """On_demand mode: the models loaded at start are pinned, counted and published."""
        versions, backend = self.versions, self.settings.backend
        residents = versions.residents
        for name in await asyncio.to_thread(residents.pin_loaded, versions.loaded):
            MODEL_LOADS.labels(name, on_demand.LOAD_PINNED).inc()
        metrics.on_scrape(lambda: residents.export(backend, versions.loaded))
        log.info(
            "on_demand model memory budget",
            extra={"budget_bytes": residents.budget_bytes, "pinned": sorted(residents.pinned)},
        )

    async def _shutdown(self, background: list[asyncio.Task[None]]) -> None:
        """Stop taking batches, finish the ones in flight, then leave the registry. Heartbeats
        go on while draining (the batches in hand stay this worker's) but mark nothing ready;
        an instance is unloaded only once no execution runs on it."""
        self._stopping.set()
        for lane in list(self.versions.lanes.values()):
            lane.wake()  # the batch loops' long blocking reads end now
        self.ready.clear()
        for task in background:
            task.cancel()
        versions = self.versions
        loaded = list(versions.loaded.values())
        try:
            await versions.stop_announcing()
            await readiness.unmark_ready(self.redis, self.id, list(versions.loaded))
        except Exception:
            log.exception("could not unmark readiness")
        serving = versions.serving_tasks
        if serving:
            _done, pending = await asyncio.wait(serving, timeout=self.settings.drain_timeout_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        await asyncio.to_thread(versions.heartbeats.stop)
        try:
            await heartbeats.deregister(self.redis, "worker", self.id)
        except Exception:
            log.exception("could not deregister")
        for version in loaded:
            await versions.unload(version, timeout_s=self.settings.drain_timeout_s)
        if self._batches.executor is not None:
            self._batches.executor.shutdown(wait=False, cancel_futures=True)
        await self.redis.aclose()
