"""The gate an instance passes before it executes a batch, with the rate limiter on.

Triton's rate limiter (``--rate-limit=execution_count``): an instance runs a batch only while it
holds the resources its instance group's ``rate_limiter`` lists; the copies are released when the
execution ends. Here the copies are counted in Redis for the whole fleet
(``shared/lua/rate_resources.lua``): per device of a host, or once for the fleet when the
resource is ``global``. A holder renews its lease every third of it while it executes, so a
worker that dies or stalls gives its resources (and its place among the waiters) back once the
lease ran out; one that stalls past its lease may then run beside the instance that took them,
which is the price of not leaking them.

Waiting instances are ordered by stride scheduling (lowest pass first; each grant adds the
instance's priority to its pass), Triton's weighting: under contention an instance of priority 2
is granted half as often as one of priority 1. A waiting instance asks again after a short pause
(5 ms, growing to 50 ms): another worker's release has no event here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import weakref
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any

import redis.asyncio as aioredis

from shared import lua
from workers.backend import ModelInstance
from workers.loading.loader import LoadedVersion
from workers.loading.placement import Devices, placements
from workers.ratelimit.resources import EXECUTION_COUNT, Needs, instance_needs
from workers.settings import WorkerSettings

log = logging.getLogger(__name__)

FIRST_PAUSE_S = 0.005
LONGEST_PAUSE_S = 0.05


class RateGate:
    def __init__(self, redis: aioredis.Redis, settings: WorkerSettings, worker_id: str):
        self.on = settings.rate_limit == EXECUTION_COUNT
        self._redis = redis
        self._id = worker_id
        self._lease_ms = settings.rate_limit_lease_ms
        self._devices = Devices.of(settings)
        self._host = os.uname().nodename
        # Per instance: its token and needs (None: it asks for nothing), and its pass.
        self._needs: weakref.WeakKeyDictionary[ModelInstance, tuple[str, Needs] | None] = (
            weakref.WeakKeyDictionary()
        )
        self._passes: dict[str, int] = {}

    def held(
        self, loaded: LoadedVersion, instance: ModelInstance
    ) -> AbstractAsyncContextManager[None]:
        """Hold the instance's resources for one execution (nothing to hold: no wait)."""
        if not self.on:
            return contextlib.nullcontext()
        if instance not in self._needs:
            self._needs[instance] = self._needs_of(loaded, instance)
        found = self._needs[instance]
        if found is None:
            return contextlib.nullcontext()
        return self._held(*found)

    def _needs_of(self, loaded: LoadedVersion, instance: ModelInstance) -> tuple[str, Needs] | None:
        config = loaded.model.config
        index = next(i for i, x in enumerate(loaded.instances) if x is instance)
        placement = placements(config, self._devices, self._devices.visible())[index]
        needs = instance_needs(
            config, placement.group.name, placement.gpu, self._host, self._devices.available
        )
        if needs is None:
            return None
        return f"{self._id}|{loaded.name}|{loaded.version}|{index}", needs

    @contextlib.asynccontextmanager
    async def _held(self, token: str, needs: Needs) -> AsyncIterator[None]:
        try:
            await self._acquire(token, needs)
        except BaseException:
            await self._release(token, needs)  # leave the waiters (or give back a late grant)
            raise
        renewing = asyncio.create_task(self._renew(token, needs), name="rate-limit-renew")
        try:
            yield
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing
            await self._release(token, needs)

    async def _call(self, op: str, token: str, needs: Needs, *extra: Any) -> Any:
        script = lua.RATE_RESOURCES
        args = [op, token, 0, self._lease_ms, *extra]
        return await self._redis.eval(script.source, len(needs.keys), *needs.keys, *args)

    async def _acquire(self, token: str, needs: Needs) -> None:
        pause = FIRST_PAUSE_S
        counts = [n for pair in needs.counts for n in pair]
        while True:
            granted, next_pass = await self._call(
                "acquire", token, needs, self._passes.get(token, 0), needs.stride, *counts
            )
            self._passes[token] = int(next_pass)
            if int(granted) == 1:
                return
            await asyncio.sleep(pause)  # polling Redis: a release elsewhere has no event here
            pause = min(pause * 2, LONGEST_PAUSE_S)

    async def _renew(self, token: str, needs: Needs) -> None:
        while True:
            await asyncio.sleep(self._lease_ms / 3000)
            try:
                if not await self._call("renew", token, needs):
                    log.warning(
                        "rate limiter lease ran out while executing", extra={"token": token}
                    )
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("could not renew a rate limiter lease", exc_info=True)

    async def _release(self, token: str, needs: Needs) -> None:
        try:
            await self._call("release", token, needs)
        except Exception:  # the lease gives them back
            log.warning("could not release rate limiter resources", exc_info=True)
