"""The admin API's reads and writes of the policy state in Redis: weights, shadow traffic,
tenants and their keys.

Each write is validated (``gateway.admin.validation``) before it touches Redis and then applied in
one transaction or one Lua script, so a refused request leaves Redis as it was and readers never
see half a change. Every write bumps a revision counter that the gateways poll
(``gateway.routing.traffic_table``, ``gateway.core.auth.TenantTable``).
"""

from __future__ import annotations

import logging

import msgspec
import redis.asyncio as aioredis

from gateway.admin.bodies import (
    Deleted,
    ShadowView,
    TenantBody,
    TenantList,
    TenantView,
    WeightsBody,
    WeightsView,
)
from gateway.admin.validation import (
    check_tenant_name,
    resolve_keys,
    tenant_from_body,
    tenant_view,
    validate_weights,
)
from gateway.core import auth
from gateway.routing.traffic_table import Shadow, decode_shadow, decode_weights
from shared import lua
from shared.fleet import change_feed, readiness
from shared.wire import keys
from shared.wire.errors import invalid, not_found

log = logging.getLogger(__name__)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class AdminStore:
    """Validated reads and writes of the policy state in Redis."""

    def __init__(self, r: aioredis.Redis):
        self._redis = r
        self._put_tenant = r.register_script(lua.PUT_TENANT.source)
        self._delete_tenant = r.register_script(lua.DELETE_TENANT.source)

    # weights

    async def _known_model(self, model: str) -> None:
        if not await self._redis.hexists(keys.models(), model):
            raise not_found(f"unknown model '{model}': no worker has loaded it")

    async def live_versions(self, model: str) -> list[int]:
        versions = (await readiness.ready_versions(self._redis, [model])).get(model, {})
        return sorted(v for v, instances in versions.items() if instances > 0)

    async def get_weights(self, model: str) -> WeightsView:
        await self._known_model(model)
        raw = await self._redis.hget(keys.weights(), model)
        weights = decode_weights(raw) if raw else {}
        return WeightsView(model, weights, await self.live_versions(model))

    async def put_weights(self, model: str, body: WeightsBody) -> WeightsView:
        await self._known_model(model)
        weights = validate_weights(body.weights)
        live = await self.live_versions(model)
        missing = sorted(v for v in weights if v not in live)
        if missing:
            raise invalid(
                f"field 'weights': model '{model}' version(s) "
                f"{', '.join(map(str, missing))} not loaded; loaded versions: "
                f"{', '.join(map(str, live)) or 'none'}"
            )
        draining = {_text(member) for member in await self._redis.hkeys(keys.draining())}
        unloading = sorted(v for v in weights if weights[v] > 0 and f"{model}:{v}" in draining)
        if unloading:
            raise invalid(
                f"field 'weights': model '{model}' version(s) "
                f"{', '.join(map(str, unloading))} are being unloaded"
            )
        stored = {str(v): w for v, w in sorted(weights.items())}
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(keys.weights(), model, msgspec.json.encode(stored))
            pipe.incr(keys.policy_rev())
            await pipe.execute()
        await change_feed.announce(self._redis, change_feed.POLICY)
        log.info("weights set", extra={"model": model, "weights": stored})
        return WeightsView(model, stored, live)

    async def delete_weights(self, model: str) -> WeightsView:
        await self._known_model(model)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hdel(keys.weights(), model)
            pipe.incr(keys.policy_rev())
            await pipe.execute()
        await change_feed.announce(self._redis, change_feed.POLICY)
        log.info("weights cleared", extra={"model": model})
        return WeightsView(model, {}, await self.live_versions(model))

    # shadow traffic

    async def get_shadow(self, model: str) -> ShadowView:
        await self._known_model(model)
        raw = await self._redis.hget(keys.shadow(), model)
        if not raw:
            raise not_found(f"no shadow traffic is configured for model '{model}'")
        setting = decode_shadow(raw)
        counters = await self._redis.hgetall(keys.shadow_stats(model, setting.version))
        return ShadowView(
            model,
            setting.version,
            setting.percent,
            {_text(k): int(v) for k, v in counters.items()},
        )

    async def put_shadow(self, model: str, body: Shadow) -> ShadowView:
        await self._known_model(model)
        live = await self.live_versions(model)
        if body.version not in live:
            raise invalid(
                f"field 'version': model '{model}' version {body.version} is not loaded; "
                f"loaded versions: {', '.join(map(str, live)) or 'none'}"
            )
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(keys.shadow(), model, msgspec.json.encode(body))
            pipe.incr(keys.policy_rev())
            await pipe.execute()
        await change_feed.announce(self._redis, change_feed.POLICY)
        log.info("shadow traffic set", extra={"model": model, "version": body.version})
        return await self.get_shadow(model)

    async def delete_shadow(self, model: str) -> Deleted:
        await self._known_model(model)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hdel(keys.shadow(), model)
            pipe.incr(keys.policy_rev())
            removed, *_ = await pipe.execute()
        await change_feed.announce(self._redis, change_feed.POLICY)
        if not removed:
            raise not_found(f"no shadow traffic is configured for model '{model}'")
        return Deleted(model)

    # tenants

    async def list_tenants(self) -> TenantList:
        return TenantList(sorted(_text(t) for t in await self._redis.hkeys(keys.tenants())))

    async def get_tenant(self, name: str) -> TenantView:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hget(keys.tenants(), name)
            # Not pipe.smembers: redis-py 8.1.0's cluster MULTI hands the command's ``keys``
            # option to SMEMBERS' reply callback, which takes none (TypeError).
            pipe.execute_command("SMEMBERS", keys.tenant_keys(name))
            raw, digests = await pipe.execute()
        if raw is None:
            raise not_found(f"unknown tenant '{name}'")
        return tenant_view(auth.decode_tenant(raw), sorted(_text(d) for d in digests))

    async def put_tenant(self, name: str, body: TenantBody) -> TenantView:
        check_tenant_name(name)
        tenant = tenant_from_body(name, body)
        current = {_text(d) for d in await self._redis.smembers(keys.tenant_keys(name))}
        digests = resolve_keys(body.api_keys, current)
        generated = [auth.generate_key() for _ in range(body.generate_keys)]
        digests += [auth.hash_key(k) for k in generated]
        digests = list(dict.fromkeys(digests))
        conflict = await self._put_tenant(
            keys=[keys.tenants(), keys.api_keys(), keys.tenant_keys(name), keys.tenants_rev()],
            args=[name, auth.encode_tenant(tenant), *digests],
        )
        if conflict:
            digest, owner = (_text(x) for x in conflict)
            raise invalid(
                f"field 'api_keys': key {auth.key_id(digest)[:19]}... already belongs to tenant "
                f"'{owner}'; a key may belong to one tenant only"
            )
        await change_feed.announce(self._redis, change_feed.TENANTS)
        log.info("tenant stored", extra={"tenant": name, "keys": len(digests)})
        view = tenant_view(tenant, sorted(digests))
        view.generated_keys = generated
        return view

    async def delete_tenant(self, name: str) -> Deleted:
        removed = await self._delete_tenant(
            keys=[keys.tenants(), keys.api_keys(), keys.tenant_keys(name), keys.tenants_rev()],
            args=[name],
        )
        if not removed:
            raise not_found(f"unknown tenant '{name}'")
        await change_feed.announce(self._redis, change_feed.TENANTS)
        log.info("tenant deleted", extra={"tenant": name})
        return Deleted(name)
