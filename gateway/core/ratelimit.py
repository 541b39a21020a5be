"""Per-tenant (and per-tenant-and-model) rate limits: token buckets in one atomic Redis script.

Every gateway process runs the same script against the same keys, and Redis runs scripts one at
a time, so N gateway replicas together admit exactly what one would. Time is Redis's own clock
(``TIME``), so gateways with skewed clocks still agree. A request passes only if every bucket
that applies has a token; then one token is taken from each.

A bucket holds at most ``burst`` tokens and refills at ``requests_per_second``; over a window of
T seconds a saturated tenant is admitted ``burst + rate * T`` requests.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from gateway.core.auth import RateLimit, Tenant
from shared import lua
from shared.wire import keys
from shared.wire.errors import ConchError, ErrorCode


def buckets_for(tenant: Tenant, model: str) -> list[tuple[str, RateLimit]]:
    """The buckets a request of this tenant for this model must pass (pure)."""
    buckets: list[tuple[str, RateLimit]] = []
    if tenant.rate_limit is not None:
        buckets.append((keys.rate_bucket(tenant.name), tenant.rate_limit))
    model_limit = tenant.model_limit(model)
    if model_limit is not None:
        buckets.append((keys.rate_bucket(tenant.name, model), model_limit[1]))
    return buckets


class RateLimiter:
    def __init__(self, r: aioredis.Redis):
        self._script = r.register_script(lua.TOKEN_BUCKET.source)  # shared/lua/token_bucket.lua

    async def wait_us(self, buckets: list[tuple[str, RateLimit]], now_us: int = 0) -> int:
        """Take a token from every bucket, or none: 0 when admitted, else microseconds to wait."""
        args: list[float | int] = [now_us]
        for _, limit in buckets:
            args += [limit.requests_per_second, limit.burst]
        return int(await self._script(keys=[key for key, _ in buckets], args=args))

    async def admit(self, tenant: Tenant | None, model: str) -> None:
        """Raise 429 (RESOURCE_EXHAUSTED with a retry-after) when the tenant is over a limit."""
        if tenant is None:
            return
        buckets = buckets_for(tenant, model)
        if not buckets:
            return
        wait = await self.wait_us(buckets)
        if wait:
            limits = "; ".join(
                f"{limit.requests_per_second:g} requests/s with burst {limit.burst}"
                + (f" for model '{model}'" if ":m:" in key else "")
                for key, limit in buckets
            )
            raise ConchError(
                ErrorCode.RESOURCE_EXHAUSTED,
                f"rate limit exceeded for tenant '{tenant.name}' ({limits}); "
                f"retry after {wait / 1e6:.3f} s",
                retry_after_s=wait / 1e6,
            )
