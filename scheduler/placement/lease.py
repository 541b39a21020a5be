"""The placer's lease: one scheduler of the fleet places models at a time.

Two placers acting on one state would both see a demand without a placement and load the
model twice. The lease is a Redis string holding the holder's id with a time to live: taken
with SET NX PX, renewed by its holder every tick with a compare-and-pexpire
(``shared/lua/placer_lease.lua``), so a scheduler that dies or is cut off loses it within the
TTL and another takes over. A holder also trusts its lease only until its own clock says the
TTL since its last successful renewal has nearly passed: a stalled holder stops placing before
Redis could have given the lease to someone else.
"""

from __future__ import annotations

import logging
import time

import redis.asyncio as aioredis

from shared import lua
from shared.wire import keys

log = logging.getLogger(__name__)

# The share of the TTL a holder trusts its lease for after a renewal (the rest covers the
# renewal's own round trip and clock drift).
TRUST = 0.8


class Lease:
    def __init__(self, r: aioredis.Redis, holder: str, ttl_ms: int, key: str | None = None):
        self._r = r
        self.holder = holder
        self.ttl_ms = ttl_ms
        self.key = key or keys.placer_lease()
        self._valid_until = 0.0  # monotonic s
        self.held = False

    def trusted(self) -> bool:
        """Held, and renewed recently enough to act on."""
        return self.held and time.monotonic() < self._valid_until

    async def hold(self) -> bool:
        """Renew the lease if held, take it if free; whether this scheduler holds it now.
        A failed call counts as not held (never raises but on cancellation)."""
        started = time.monotonic()
        try:
            if self.held:
                got = bool(
                    await self._r.eval(
                        lua.PLACER_LEASE.source, 1, self.key, self.holder, self.ttl_ms
                    )
                )
            else:
                got = bool(await self._r.set(self.key, self.holder, nx=True, px=self.ttl_ms))
        except Exception as exc:
            got = False
            log.warning("placer lease not renewed", extra={"error": str(exc)})
        if got != self.held:
            log.info(
                "placer lease taken" if got else "placer lease lost",
                extra={"holder": self.holder},
            )
        self.held = got
        self._valid_until = started + TRUST * self.ttl_ms / 1000 if got else 0.0
        return self.trusted()

    async def release(self) -> None:
        """Give the lease up (a scheduler stopping): another takes over at its next tick."""
        if not self.held:
            return
        self.held = False
        self._valid_until = 0.0
        try:
            await self._r.eval(lua.PLACER_LEASE.source, 1, self.key, self.holder, 0)
        except Exception as exc:
            log.warning("placer lease not released", extra={"error": str(exc)})
