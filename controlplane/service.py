"""The control plane service: watch the gateway registry, publish snapshots, serve ADS.

Startup builds and validates a snapshot before the gRPC port opens, so a misconfiguration (say a
listener port above 65535) stops the service at once with the reason, instead of leaving Envoy
without a listener. Afterwards a snapshot that fails validation is logged and skipped; the last
good one stays in force.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

import grpc
from redis.exceptions import RedisError

from controlplane import edge_tls, resources
from controlplane.ads import AggregatedDiscoveryService, add_to_server
from controlplane.gateway_endpoints import Registration, Resolver, live_gateways
from controlplane.health import HealthServer
from controlplane.metrics import Metrics
from controlplane.settings import ControlPlaneSettings
from controlplane.snapshot import InvalidSnapshot, SnapshotStore
from shared.runtime import logs, redis_conn

log = logging.getLogger("controlplane")


class ControlPlane:
    def __init__(self, settings: ControlPlaneSettings):
        self.settings = settings
        self.metrics = Metrics()
        self.store = SnapshotStore(retire_timeout_s=settings.retire_timeout_s)
        self.resolver = Resolver(settings.fallback_host, settings.dns_ttl_s)
        self.health = HealthServer(self.metrics, ready=lambda: self.store.current is not None)
        self.xds_port = settings.xds_port
        self.health_port = settings.health_port
        self._stop = asyncio.Event()
        self._server: grpc.aio.Server | None = None
        self._endpoints: set[resources.Endpoint] | None = None
        self._grpc_endpoints: set[resources.Endpoint] | None = None
        # TLS at the edge: the files, read now (a bad one stops the service) and watched.
        self.certificates = (
            edge_tls.CertificateFiles(settings) if edge_tls.enabled(settings) else None
        )

    def publish(
        self,
        endpoints: set[resources.Endpoint],
        grpc_endpoints: set[resources.Endpoint] | None = None,
    ) -> None:
        """Build, validate and publish the snapshot for these endpoints (or keep the old one)."""
        grpc = set() if grpc_endpoints is None else grpc_endpoints
        try:
            snapshot = self.store.propose(self._build(endpoints, grpc))
        except InvalidSnapshot as exc:
            self.metrics.snapshots_rejected.inc()
            log.error(
                "snapshot rejected; keeping the last good one", extra={"problems": exc.problems}
            )
            return
        if endpoints != self._endpoints:
            log.info(
                "gateway endpoints changed",
                extra={"endpoints": [f"{e.address}:{e.port}" for e in sorted(endpoints)]},
            )
            self._endpoints = set(endpoints)
        if self.settings.grpc_listener_port and grpc != self._grpc_endpoints:
            log.info(
                "gateway grpc endpoints changed",
                extra={"endpoints": [f"{e.address}:{e.port}" for e in sorted(grpc)]},
            )
            self._grpc_endpoints = set(grpc)
        self.metrics.live_gateways.set(len(endpoints))
        if snapshot is not None:
            self.metrics.snapshot_version.set(snapshot.version)

    def _build(
        self, endpoints: set[resources.Endpoint], grpc: set[resources.Endpoint]
    ) -> resources.Resources:
        certificates = self.certificates.current if self.certificates else None
        return resources.build(self.settings, endpoints, grpc, certificates)

    async def start(self) -> None:
        s = self.settings
        # Fail fast on settings Envoy would reject: the first snapshot must be valid.
        self.store.propose(self._build(set(), set()))
        self.metrics.snapshot_version.set(1)
        server = grpc.aio.server(
            options=[
                ("grpc.keepalive_time_ms", 30_000),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.max_pings_without_data", 0),
                # grpcio's default SO_REUSEPORT would let another process share the port.
                ("grpc.so_reuseport", 0),
            ]
        )
        add_to_server(server, AggregatedDiscoveryService(self.store, self.metrics))
        self.xds_port = server.add_insecure_port(f"{s.xds_host}:{s.xds_port}")
        if self.xds_port == 0:
            raise OSError(f"cannot bind the xDS port {s.xds_host}:{s.xds_port}")
        await server.start()
        self._server = server
        self.health_port = await self.health.start(s.health_host, s.health_port)
        log.info("xds server listening", extra={"host": s.xds_host, "port": self.xds_port})

    async def watch(self) -> None:
        """Poll the registry until stopped; Redis outages keep the last snapshot in force."""
        s = self.settings
        redis = redis_conn.connect(s.redis_url, max_connections=4, name="conch-controlplane")
        failing = False
        remembered: dict[str, Registration] = {}
        grace_ms = int(s.gateway_grace_s * 1000)
        try:
            while not self._stop.is_set():
                try:
                    regs = await live_gateways(redis, grace_ms=grace_ms, remembered=remembered)
                    self.publish(*await self.resolver.endpoint_sets(regs))
                    if failing:
                        log.info("gateway registry readable again")
                    failing = False
                except (RedisError, OSError, TimeoutError) as exc:
                    self.metrics.redis_errors.inc()
                    if not failing:
                        log.warning("cannot read the gateway registry", extra={"error": str(exc)})
                    failing = True
                except Exception as exc:  # a bug: log it, keep serving the last snapshot
                    self.metrics.redis_errors.inc()
                    if not failing:
                        log.exception("registry poll failed", extra={"error": str(exc)})
                    failing = True
                self.store.release_retired()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), s.poll_interval_s)
        finally:
            await redis.aclose()

    async def watch_certificates(self) -> None:
        """Look at the edge's certificate files every ``edge_tls_poll_s``; a rotation is
        published with the endpoints last read (Envoy's new connections get it)."""
        if self.certificates is None:
            return
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.settings.edge_tls_poll_s)
            if self.certificates.poll():
                self.publish(set(self._endpoints or ()), set(self._grpc_endpoints or ()))

    def stop(self) -> None:
        self._stop.set()

    async def close(self) -> None:
        self._stop.set()
        await self.health.stop()
        if self._server is not None:
            await self._server.stop(grace=1.0)


async def run(settings: ControlPlaneSettings) -> None:
    plane = ControlPlane(settings)
    await plane.start()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, plane.stop)
    certificates = asyncio.create_task(plane.watch_certificates())
    try:
        await plane.watch()
    finally:
        certificates.cancel()
        log.info("control plane stopping")
        await plane.close()


def main() -> None:
    """``python -m controlplane``: read settings from the environment, serve until SIGTERM."""
    settings = ControlPlaneSettings.from_env()
    logs.setup("controlplane", settings.log_level, settings.log_format)
    try:
        asyncio.run(run(settings))
    except edge_tls.CertificateError as exc:
        log.error("edge TLS settings cannot work", extra={"error": str(exc)})
        raise SystemExit(2) from exc
    except InvalidSnapshot as exc:
        log.error("settings give an invalid Envoy config", extra={"problems": exc.problems})
        raise SystemExit(2) from exc
