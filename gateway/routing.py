"""Traffic policy on the request path: who may call (auth), how often (rate limits), and which
version answers (weights, stickiness, shadow traffic).

Version choice is a pure function over the model's weights, the versions that are live, and a
point in [0, 1): random per request, or a hash of the request's route key, so that one key goes
to one version while the weights stand. Weights, shadow settings and draining versions live in
Redis; each gateway process reloads them when the policy revision changes, checked every refresh
interval (250 ms by default), so a change reaches every replica well within one second.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import msgspec
import redis.asyncio as aioredis

from gateway.auth import Tenant, TenantTable, authorize
from gateway.model_table import ModelTable
from gateway.ratelimit import RateLimiter
from shared import keys, periodic

if TYPE_CHECKING:
    from gateway.dataplane import DataPlane
    from gateway.http_codec import ParsedRequest

log = logging.getLogger(__name__)

ROUTE_KEY_HEADER = "x-conch-route-key"
# Shadow requests in flight per gateway process beyond which more are skipped (and counted).
MAX_SHADOW_IN_FLIGHT = 256


class Shadow(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A share of the requests routed by weights is also sent to ``version``; its answer is
    recorded and discarded."""

    version: Annotated[int, msgspec.Meta(ge=1)]
    percent: Annotated[float, msgspec.Meta(gt=0, le=100)]


decode_shadow = msgspec.json.Decoder(Shadow).decode
decode_weights = msgspec.json.Decoder(dict[str, int]).decode


def route_point(route_key: str | None, rng: Callable[[], float] = random.random) -> float:
    """A point in [0, 1): a stable hash of the route key, or random without one."""
    if not route_key:
        return rng()
    digest = hashlib.blake2b(route_key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def choose_version(weights: Mapping[int, int], live: Collection[int], point: float) -> int | None:
    """The version whose share of the cumulative weights (live versions with weight > 0, in
    version order) contains ``point``; None when no weighted version is live."""
    candidates = sorted((v, w) for v, w in weights.items() if w > 0 and v in live)
    total = sum(w for _, w in candidates)
    if total == 0:
        return None
    target = point * total
    reached = 0
    for version, weight in candidates:
        reached += weight
        if target < reached:
            return version
    return candidates[-1][0]


class RoutingTable:
    """This process's copy of weights, shadow settings and draining versions."""

    def __init__(self, r: aioredis.Redis):
        self._redis = r
        self._rev: int | None = None
        self.weights: dict[str, dict[int, int]] = {}
        self.shadows: dict[str, Shadow] = {}
        self.draining: set[tuple[str, int]] = set()

    async def refresh(self) -> None:
        rev = int(await self._redis.get(keys.policy_rev()) or 0)
        if rev == self._rev:
            return
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.get(keys.policy_rev())
            pipe.hgetall(keys.weights())
            pipe.hgetall(keys.shadow())
            pipe.hgetall(keys.draining())
            rev_now, raw_weights, raw_shadows, raw_draining = await pipe.execute()
        weights: dict[str, dict[int, int]] = {}
        for model, payload in raw_weights.items():
            try:
                weights[_text(model)] = {int(v): w for v, w in decode_weights(payload).items()}
            except (msgspec.DecodeError, ValueError):
                log.error("unreadable weights skipped", extra={"model": _text(model)})
        shadows: dict[str, Shadow] = {}
        for model, payload in raw_shadows.items():
            try:
                shadows[_text(model)] = decode_shadow(payload)
            except msgspec.DecodeError:
                log.error("unreadable shadow setting skipped", extra={"model": _text(model)})
        draining: set[tuple[str, int]] = set()
        for member in raw_draining:
            model, _, version = _text(member).rpartition(":")
            if version.isdigit():
                draining.add((model, int(version)))
        self.weights, self.shadows, self.draining = weights, shadows, draining
        self._rev = int(rev_now or 0)


@dataclass(frozen=True)
class Caller:
    """Who sent a request, as the protocol adapter saw it."""

    authorization: str | None = None
    route_key: str | None = None
    # Set for requests the gateway makes itself (shadow traffic): no auth, no rate limit.
    trusted: bool = False
    tenant: Tenant | None = None


ANONYMOUS_CALLER = Caller()


class TrafficPolicy:
    """Auth, rate limits, version choice and shadow traffic for one gateway process."""

    def __init__(
        self,
        r: aioredis.Redis,
        table: ModelTable,
        refresh_interval_s: float,
        allow_anonymous: bool,
        rng: Callable[[], float] = random.random,
    ):
        self._redis = r
        self._table = table
        self._interval = refresh_interval_s
        self._rng = rng
        self.tenants = TenantTable(r, refresh_interval_s, allow_anonymous)
        self.routing = RoutingTable(r)
        self.limiter = RateLimiter(r)
        self._shadow_tasks: set[asyncio.Task[None]] = set()
        self.loaded = asyncio.Event()

    async def refresh(self) -> None:
        await self.tenants.refresh()
        await self.routing.refresh()
        self.loaded.set()

    async def run(self) -> None:
        await periodic.every(self._interval, self.refresh, "traffic policy")

    async def stop(self) -> None:
        for task in list(self._shadow_tasks):
            task.cancel()
        await asyncio.gather(*self._shadow_tasks, return_exceptions=True)

    async def admit(self, model: str, caller: Caller) -> Tenant | None:
        """401 / 403 / 429, or the calling tenant (None: anonymous, unrestricted)."""
        if caller.trusted:
            return caller.tenant
        tenant = self.tenants.identify(caller.authorization)
        authorize(tenant, model)
        await self.limiter.admit(tenant, model)
        return tenant

    def live_versions(self, model: str) -> set[int]:
        known = self._table.versions.get(model, {})
        draining = self.routing.draining
        return {v for v, n in known.items() if n > 0 and (model, v) not in draining}

    def route(self, model: str, version: str | None, caller: Caller) -> int:
        """An explicit version bypasses the weights; otherwise the weighted choice among live
        versions, else Triton's default (the newest live version)."""
        if version:
            return self._table.resolve_version(model, version)
        self._table.config(model)
        live = self.live_versions(model)
        weights = self.routing.weights.get(model)
        if weights:
            chosen = choose_version(weights, live, route_point(caller.route_key, self._rng))
            if chosen is not None:
                return chosen
        if live:
            return max(live)
        return self._table.resolve_version(model, None)

    def shadow(
        self,
        dataplane: DataPlane,
        model: str,
        version: str | None,
        chosen: int,
        parsed: ParsedRequest,
        tenant: Tenant | None,
    ) -> None:
        """Maybe send a copy of a weight-routed request to the model's shadow version."""
        setting = self.routing.shadows.get(model)
        if setting is None or version or setting.version == chosen:
            return
        if self._rng() * 100 >= setting.percent:
            return
        if setting.version not in self.live_versions(model):
            return
        if len(self._shadow_tasks) >= MAX_SHADOW_IN_FLIGHT:
            self._record(model, setting.version, "skipped", None)
            return
        caller = Caller(trusted=True, tenant=tenant)
        task = asyncio.create_task(
            self._shadow_request(dataplane, model, setting.version, chosen, parsed, caller)
        )
        self._shadow_tasks.add(task)
        task.add_done_callback(self._shadow_tasks.discard)

    async def _shadow_request(
        self,
        dataplane: DataPlane,
        model: str,
        version: int,
        primary: int,
        parsed: ParsedRequest,
        caller: Caller,
    ) -> None:
        started = time.perf_counter()
        error = ""
        try:
            await dataplane.infer(model, str(version), parsed, caller=caller)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        latency_us = int((time.perf_counter() - started) * 1e6)
        outcome = "failed" if error else "succeeded"
        log.info(
            "shadow request answered",
            extra={
                "model": model,
                "shadow_version": version,
                "primary_version": primary,
                "outcome": outcome,
                "latency_ms": round(latency_us / 1000, 3),
                "error": error,
            },
        )
        await self._record_async(model, version, outcome, latency_us)

    def _record(self, model: str, version: int, outcome: str, latency_us: int | None) -> None:
        task = asyncio.create_task(self._record_async(model, version, outcome, latency_us))
        self._shadow_tasks.add(task)
        task.add_done_callback(self._shadow_tasks.discard)

    async def _record_async(
        self, model: str, version: int, outcome: str, latency_us: int | None
    ) -> None:
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                key = keys.shadow_stats(model, version)
                pipe.hincrby(key, outcome, 1)
                if latency_us is not None:
                    pipe.hincrby(key, "sent", 1)
                    pipe.hincrby(key, "latency_us", latency_us)
                await pipe.execute()
        except Exception:
            log.exception("could not record a shadow outcome", extra={"model": model})


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
