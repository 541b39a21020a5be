"""This process's copy of the traffic settings in Redis: version weights, shadow traffic and the
versions being unloaded (draining).

The admin API writes weights and shadow settings (``gateway.admin.store``), workers mark the
versions they unload as draining; every writer bumps the policy revision and announces the
change on the change feed (``shared.fleet.change_feed``), and each gateway process re-reads all
three in one transaction when told (and on the feed's safety poll), only when that revision changed,
so a change reaches every replica within a Redis round trip or two.
"""

from __future__ import annotations

import logging
from typing import Annotated

import msgspec
import redis.asyncio as aioredis

from shared.wire import keys

log = logging.getLogger(__name__)


class Shadow(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A share of the requests routed by weights is also sent to ``version``; its answer is
    recorded and discarded."""

    version: Annotated[int, msgspec.Meta(ge=1)]
    percent: Annotated[float, msgspec.Meta(gt=0, le=100)]


decode_shadow = msgspec.json.Decoder(Shadow).decode
decode_weights = msgspec.json.Decoder(dict[str, int]).decode


class TrafficTable:
    def __init__(self, r: aioredis.Redis):
        self._redis = r
        self._rev: int | None = None
        self.weights: dict[str, dict[int, int]] = {}
        self.shadows: dict[str, Shadow] = {}
        self.draining: set[tuple[str, int]] = set()

    @property
    def loaded(self) -> bool:
        return self._rev is not None

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


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
