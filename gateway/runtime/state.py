"""One gateway process's state: the Redis client, the in-memory copies of Redis state (model
table, tenants, traffic settings), the reply reader, the data plane over them, the admin store
and repository control, and the background tasks that keep them fresh.

Built once per process in the application's lifespan; the REST routes (``gateway.rest.app``) and the
gRPC servicer (``gateway.grpc.service``) both read it, neither knows the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid

from gateway.admin.store import AdminStore
from gateway.core import cancellation
from gateway.core.admission import Admission
from gateway.core.auth import TenantTable
from gateway.core.cold_start import ColdStarts
from gateway.core.dataplane import DataPlane
from gateway.core.model_table import ModelTable
from gateway.core.ratelimit import RateLimiter
from gateway.core.stream_watch import watch_streams
from gateway.extensions.around_infer import InferExtensions
from gateway.extensions.cache_stats import CacheStats
from gateway.extensions.response_cache import ResponseCache
from gateway.extensions.shared_memory import SharedMemoryManager
from gateway.extensions.trace_settings import TraceSettings
from gateway.repository.control import RepositoryControl
from gateway.routing.traffic_table import TrafficTable
from gateway.routing.version_router import VersionRouter
from gateway.runtime import heartbeat as gateway_heartbeat
from gateway.runtime.readiness import Readiness
from gateway.runtime.status import GatewayProcess
from gateway.settings import GatewaySettings
from shared import metrics
from shared.fleet import change_feed, control, durability, heartbeats, log_settings
from shared.fleet.change_feed import ChangeFeed
from shared.fleet.replies import ReplyRouter
from shared.runtime import redis_conn, tracing

log = logging.getLogger(__name__)


class GatewayState:
    def __init__(self, settings: GatewaySettings, process: GatewayProcess | None = None):
        self.settings = settings
        self.process = process
        self.id = f"{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.redis = redis_conn.connect(
            settings.redis_url, max_connections=settings.redis_pool_size, name="conch-gateway"
        )
        durability.configure(
            self.redis, settings.redis_wait_replicas, settings.redis_wait_timeout_ms
        )
        # One driver for every cached copy of Redis state: re-read when the change feed
        # announces a change, and on the safety poll (the refresh interval).
        self.feed = ChangeFeed(
            settings.redis_url, settings.refresh_interval_ms / 1000, name="conch-gateway-changes"
        )
        self.table = ModelTable(self.redis, on_stale=lambda: self.feed.kick(change_feed.MODELS))
        self.table.on_refresh(lambda: cancellation.zero_counters(self.table.configs))
        self.readiness = Readiness(
            self.table, settings.strict_readiness, process, serves_grpc=bool(settings.grpc_port)
        )
        self.replies = ReplyRouter(settings.redis_url, self.id)
        self.tenants = TenantTable(self.redis, settings.allow_anonymous)
        self.traffic = TrafficTable(self.redis)
        self.policy_loaded = asyncio.Event()
        self.dataplane = DataPlane(
            self.redis,
            self.table,
            self.replies,
            settings.default_timeout_ms,
            Admission(self.tenants, RateLimiter(self.redis)),
            VersionRouter(self.table, self.traffic),
            gone_ms=settings.gone_bound_ms,
            max_in_flight=settings.max_in_flight,
            direct=settings.direct_path,
            stream_silence_ms=settings.stream_silence_timeout_ms,
        )
        if settings.model_control_mode == control.MODE_ON_DEMAND:
            self.dataplane.cold_starts = ColdStarts(
                self.redis, self.table, settings.cold_start_timeout_s
            )
        self.shared_memory = SharedMemoryManager(
            self.redis, settings.shm_host or os.uname().nodename, settings.allow_client_shm
        )
        self.dataplane.extensions = InferExtensions(
            self.redis,
            self.shared_memory,
            settings.http_header_forward_pattern,
            settings.grpc_header_forward_pattern,
        )
        self.cache_stats = CacheStats(self.redis)
        self.response_cache = ResponseCache(
            settings.cache_redis_url,
            self.cache_stats,
            max_entry_bytes=settings.cache_max_entry_bytes,
        )
        if self.response_cache.enabled:
            self.dataplane.cache = self.response_cache
        self.traces = TraceSettings(self.redis)
        self.dataplane.traces = self.traces
        self.admin = AdminStore(self.redis)
        self.repository = RepositoryControl(
            self.redis,
            self.table,
            settings.control_timeout_s,
            settings.max_upload_bytes,
            settings.model_control_mode,
        )
        self.repository.cache = self.dataplane.cache
        self.feed.on(change_feed.MODELS, self.table.refresh)
        self.feed.on_names(change_feed.MODELS, self.table.refresh_models)
        self.feed.on(change_feed.TENANTS, self.refresh_tenants)
        self.feed.on(change_feed.POLICY, self.refresh_traffic)
        if tracing.ENABLED:  # settings to follow only while this process traces
            self.feed.on(change_feed.TRACE, self.traces.refresh)
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Start the background tasks and wait (a bounded time) for the first copies."""
        self._tasks = [
            asyncio.create_task(self.feed.run(), name="change-feed"),
            asyncio.create_task(self.replies.run(), name="reply-reader"),
            asyncio.create_task(
                watch_streams(
                    self.redis,
                    self.replies,
                    self.settings.dead_bound_ms,
                    self.settings.worker_heartbeat_ttl_ms,
                ),
                name="stream-watch",
            ),
            asyncio.create_task(self.heartbeat(), name="heartbeat"),
            asyncio.create_task(metrics.redis_rtt_probe(self.redis, "gateway"), name="rtt"),
            asyncio.create_task(log_settings.follow(self.settings.redis_url), name="log-settings"),
        ]
        await self.response_cache.check()
        stopping = self.process.stopping if self.process is not None else asyncio.Event()
        for first_copy in (self.table.loaded, self.policy_loaded):
            if not await _set_before(first_copy, stopping, timeout_s=10):
                if not stopping.is_set():
                    log.warning("model table not loaded yet; serving anyway")
                return

    async def stop(self) -> None:
        """Shadow requests, then the background tasks; deregister; close the Redis pool."""
        await self.dataplane.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.response_cache.close()
        await self.cache_stats.close()
        with contextlib.suppress(Exception):
            await heartbeats.deregister(self.redis, "gateway", self.id)
        self.shared_memory.close()
        await self.redis.aclose()

    async def refresh_tenants(self) -> None:
        """Re-read only when the revision changed."""
        await self.tenants.refresh()
        if self.traffic.loaded:
            self.policy_loaded.set()

    async def refresh_traffic(self) -> None:
        """Re-read only when the revision changed."""
        await self.traffic.refresh()
        if self.tenants.loaded:
            self.policy_loaded.set()

    async def heartbeat(self) -> None:
        s = self.settings
        info = {"host": s.advertise_host, "port": str(s.http_port), "pid": str(os.getpid())}
        if s.grpc_port and (self.process is None or self.process.serves_grpc):
            # The edge's control plane routes gRPC here (controlplane.gateway_endpoints).
            info["grpc_port"] = str(s.grpc_port)
        # On the process's shared boundaries (``shared.runtime.ticks``): one wake with uvicorn's
        # tick.
        await gateway_heartbeat.beat_forever(
            s.redis_url,
            self.redis,
            self.id,
            info,
            s.heartbeat_ttl_ms,
            s.heartbeat_interval_ms / 1000,
        )


async def _set_before(event: asyncio.Event, stopping: asyncio.Event, timeout_s: float) -> bool:
    """Whether ``event`` was set within the bound and before a stop was asked for (with Redis
    unreachable, start-up would otherwise hold a SIGTERM for its whole bound)."""
    if event.is_set():
        return True
    waits = [asyncio.ensure_future(event.wait()), asyncio.ensure_future(stopping.wait())]
    try:
        await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
    return event.is_set() and not stopping.is_set()
