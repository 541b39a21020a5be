"""Live gateways, as the gateways themselves announce them in Redis.

A gateway is live while its score in ``keys.service_registry("gateway")`` (its heartbeat expiry,
ms since the epoch) is in the future; its address is in ``keys.service_info("gateway", id)``.
A gateway whose heartbeat expired less than a grace period ago stays routed (with the address it
last registered): a Redis that stalls for longer than the heartbeat TTL stops every gateway's
heartbeat at once, and dropping them all would leave Envoy with no upstream while every gateway
is alive. A gateway that stops cleanly leaves the registry at once; one that died is ejected by
Envoy's own health checks within a second, long before the grace runs out.
Several gateway processes may share one HTTP port (uvicorn workers), so entries are merged by
address and port. A process that serves gRPC (a service's first) also registers ``grpc_port``;
its gRPC endpoint is health-checked on its HTTP port. Envoy only accepts IP addresses in EDS,
so names (compose service names) are resolved here, and an unspecified address (a gateway that
bound 0.0.0.0 and advertised it) is mapped to a fallback.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import time
from dataclasses import dataclass
from typing import cast

import redis.asyncio as aioredis

from controlplane.resources import Endpoint
from shared.wire import keys

log = logging.getLogger("controlplane.gateway_endpoints")

_UNSPECIFIED = {"", "0.0.0.0", "::", "[::]"}


@dataclass(frozen=True)
class Registration:
    """One live gateway process, as registered (before address resolution)."""

    gateway_id: str
    host: str
    port: int
    # The KServe v2 gRPC port this process serves (0: none).
    grpc_port: int = 0


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def live_gateways(
    r: aioredis.Redis,
    now_ms: int | None = None,
    grace_ms: int = 0,
    remembered: dict[str, Registration] | None = None,
) -> list[Registration]:
    """Every gateway whose heartbeat expired less than ``grace_ms`` ago and whose details are
    readable, or remembered in ``remembered`` (which this call brings up to date) from an
    earlier read: a gateway's details expire with its heartbeat."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    memory: dict[str, Registration] = {} if remembered is None else remembered
    ids = [
        _text(cast(bytes, m))  # members, no scores: bytes (decode_responses=False)
        for m in await r.zrangebyscore(keys.service_registry("gateway"), now - grace_ms, "+inf")
    ]
    for gone in set(memory) - set(ids):
        del memory[gone]
    if not ids:
        return []
    async with r.pipeline(transaction=False) as pipe:
        for gateway_id in ids:
            pipe.hgetall(keys.service_info("gateway", gateway_id))
        infos = await pipe.execute()
    found: list[Registration] = []
    for gateway_id, raw in zip(ids, infos, strict=True):
        info = {_text(k): _text(v) for k, v in raw.items()}
        try:
            port = int(info["port"])
            host = info.get("host", "")
            grpc_port = int(info.get("grpc_port") or 0)
        except (KeyError, ValueError):
            # Expired (the heartbeat is late: use what it last said), or not routable.
            if gateway_id in memory:
                found.append(memory[gateway_id])
            continue
        if 0 < port < 65536:
            grpc_port = grpc_port if 0 < grpc_port < 65536 else 0
            memory[gateway_id] = Registration(gateway_id, host, port, grpc_port)
            found.append(memory[gateway_id])
    return found


class Resolver:
    """Turns registered hosts into IP addresses, caching names for ``ttl_s``."""

    def __init__(self, fallback_host: str, ttl_s: float = 5.0):
        self.fallback_host = fallback_host
        self.ttl_s = ttl_s
        self._cache: dict[str, tuple[str | None, float]] = {}

    async def endpoints(self, registrations: list[Registration]) -> set[Endpoint]:
        return (await self.endpoint_sets(registrations))[0]

    async def endpoint_sets(
        self, registrations: list[Registration]
    ) -> tuple[set[Endpoint], set[Endpoint]]:
        """The HTTP endpoints, and the gRPC endpoints (health-checked on their HTTP port)."""
        result: set[Endpoint] = set()
        grpc: set[Endpoint] = set()
        for reg in registrations:
            address = await self.resolve(reg.host)
            if address is None:
                log.warning(
                    "gateway address does not resolve; skipped",
                    extra={"gateway": reg.gateway_id, "host": reg.host},
                )
                continue
            result.add(Endpoint(address, reg.port))
            if reg.grpc_port:
                grpc.add(Endpoint(address, reg.grpc_port, health_port=reg.port))
        return result, grpc

    async def resolve(self, host: str) -> str | None:
        host = host.strip()
        if host in _UNSPECIFIED:
            host = self.fallback_host
        literal = host.strip("[]")
        try:
            return str(ipaddress.ip_address(literal))
        except ValueError:
            pass
        cached = self._cache.get(host)
        now = time.monotonic()
        if cached is not None and cached[1] > now:
            return cached[0]
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, None, type=socket.SOCK_STREAM
            )
            address: str | None = str(infos[0][4][0]) if infos else None
        except OSError:
            address = None
        self._cache[host] = (address, now + (self.ttl_s if address else 1.0))
        return address
