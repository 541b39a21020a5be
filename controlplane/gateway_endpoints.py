"""Live gateways, as the gateways themselves announce them in Redis.

A gateway is live while its score in ``keys.service_registry("gateway")`` (its heartbeat expiry,
ms since the epoch) is in the future; its address is in ``keys.service_info("gateway", id)``.
Several gateway processes may share one HTTP port (uvicorn workers), so entries are merged by
address and port. Envoy only accepts IP addresses in EDS, so names (compose service names) are
resolved here, and an unspecified address (a gateway that bound 0.0.0.0 and advertised it) is
mapped to a fallback.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import time
from dataclasses import dataclass

import redis.asyncio as aioredis

from controlplane.resources import Endpoint
from shared import keys

log = logging.getLogger("controlplane.gateway_endpoints")

_UNSPECIFIED = {"", "0.0.0.0", "::", "[::]"}


@dataclass(frozen=True)
class Registration:
    """One live gateway process, as registered (before address resolution)."""

    gateway_id: str
    host: str
    port: int


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def live_gateways(r: aioredis.Redis, now_ms: int | None = None) -> list[Registration]:
    """Every gateway whose heartbeat has not expired and whose details are readable."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    ids = [_text(m) for m in await r.zrangebyscore(keys.service_registry("gateway"), now, "+inf")]
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
        except (KeyError, ValueError):
            continue  # expired between the two reads, or not a gateway we can route to
        if 0 < port < 65536:
            found.append(Registration(gateway_id, host, port))
    return found


class Resolver:
    """Turns registered hosts into IP addresses, caching names for ``ttl_s``."""

    def __init__(self, fallback_host: str, ttl_s: float = 5.0):
        self.fallback_host = fallback_host
        self.ttl_s = ttl_s
        self._cache: dict[str, tuple[str | None, float]] = {}

    async def endpoints(self, registrations: list[Registration]) -> set[Endpoint]:
        result: set[Endpoint] = set()
        for reg in registrations:
            address = await self.resolve(reg.host)
            if address is None:
                log.warning(
                    "gateway address does not resolve; skipped",
                    extra={"gateway": reg.gateway_id, "host": reg.host},
                )
                continue
            result.add(Endpoint(address, reg.port))
        return result

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
