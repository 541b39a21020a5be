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
from shared.wire import keys
from shared.wire.errors import ConchError, ErrorCode

# KEYS: the buckets. ARGV[1]: now in microseconds (0: Redis TIME), then per bucket: rate, burst.
# Returns 0 when admitted, else the microseconds until a token is available in every bucket.
TOKEN_BUCKET_LUA = """
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local tokens, stamps = {}, {}
local wait = 0
for i = 1, #KEYS do
  local rate = tonumber(ARGV[2 * i])
  local burst = tonumber(ARGV[2 * i + 1])
  local state = redis.call('HMGET', KEYS[i], 'tokens', 'ts')
  local have, ts = tonumber(state[1]), tonumber(state[2])
  if have == nil or ts == nil then
    have, ts = burst, now
  elseif now > ts then
    have = math.min(burst, have + (now - ts) * rate / 1000000)
    ts = now
  end
  if have > burst then have = burst end
  tokens[i], stamps[i] = have, ts
  if have < 1 then
    local need = math.ceil((1 - have) * 1000000 / rate)
    if need > wait then wait = need end
  end
end
for i = 1, #KEYS do
  local rate = tonumber(ARGV[2 * i])
  local burst = tonumber(ARGV[2 * i + 1])
  local have = tokens[i]
  if wait == 0 then have = have - 1 end
  redis.call('HSET', KEYS[i], 'tokens', tostring(have), 'ts', tostring(stamps[i]))
  redis.call('PEXPIRE', KEYS[i], math.ceil(burst * 1000 / rate) + 1000)
end
return wait
"""


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
        self._script = r.register_script(TOKEN_BUCKET_LUA)

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
