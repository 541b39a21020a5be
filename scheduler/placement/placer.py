"""The on_demand placer: loads a model on one worker when it is first asked for, follows the
load to its end, and moves copies with traffic (docs/many-models.md).

Every scheduler runs one in ``--model-control-mode on_demand``; only the holder of the lease
(``scheduler.placement.lease``) acts. Each tick: renew the lease, read the fleet
(``scheduler.placement.fleet_view``), decide (``shared.placement.decide``, pure), carry the
actions out, log each. A tick runs every ``placer_tick_ms`` and at once when a gateway
announces a new demand (``change_feed.DEMAND``); between ticks the task sleeps, so an idle
fleet costs a few reads per tick. A tick that fails (Redis away) is logged and the next one
starts from what Redis then says: every decision is made again from the state, nothing is
remembered between ticks but the unloads just sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import redis.asyncio as aioredis

from scheduler.placement import fleet_view
from scheduler.placement.lease import Lease
from scheduler.settings import SchedulerSettings
from shared.fleet import control, expected_models, on_demand
from shared.placement import decide
from shared.placement.decide import Action, Fleet, Policy
from shared.runtime import clock
from shared.wire import keys

log = logging.getLogger(__name__)

# An unload sent is not sent again, and its copy not counted, for this long (the worker drops
# the model from its resident set with its next heartbeat).
UNLOADING_MS = 10_000


class Placer:
    def __init__(self, r: aioredis.Redis, settings: SchedulerSettings, holder: str):
        self._r = r
        self.settings = settings
        self.holder = holder
        self.lease = Lease(r, holder, settings.placer_lease_ms)
        self.policy = Policy(
            load_timeout_ms=int(settings.model_load_timeout_s * 1000),
            idle_unload_ms=int(settings.model_idle_unload_s * 1000),
            min_copies=settings.model_min_copies,
        )
        self._wake = asyncio.Event()
        self._ticking = asyncio.Lock()  # one tick at a time, whoever calls it
        # (model, worker) -> when its unload was sent (ms)
        self._unloading: dict[tuple[str, str], int] = {}
        self.ticks = 0  # ticks run (tests and the idle-cost check read it)

    async def on_demand_notice(self) -> None:
        """The change feed's DEMAND refresher: wake the loop now (cheap, never fails)."""
        self._wake.set()

    async def run(self) -> None:
        """Tick until cancelled; the lease is given up on the way out."""
        tick_s = self.settings.placer_tick_ms / 1000
        try:
            while True:
                try:
                    await self.tick()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("placer tick failed; trying again next tick")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=tick_s)
                self._wake.clear()
        finally:
            await self.lease.release()

    async def tick(self) -> list[Action]:
        """One look at the fleet; the actions carried out (none unless the lease is held)."""
        async with self._ticking:
            return await self._tick()

    async def _tick(self) -> list[Action]:
        self.ticks += 1
        if not await self.lease.hold():
            return []
        now = clock.now_ms()
        self._unloading = {k: t for k, t in self._unloading.items() if now - t < UNLOADING_MS}
        fleet = await fleet_view.read_fleet(
            self._r, self._unloading, every_resident=self.policy.min_copies > 1
        )
        actions = decide.decide(fleet, self.policy)
        for action in actions:
            if not self.lease.trusted():  # a slow tick outlived the lease: stop here
                log.warning("placer lease no longer trusted; stopping this tick")
                break
            await self._apply(action, fleet)
        return actions

    async def _apply(self, action: Action, fleet: Fleet) -> None:
        extra = {
            "model": action.model,
            "worker": action.worker,
            "reason": action.reason,
            "decision": action.kind,
            "detail": action.message,
        }
        if action.tried:
            extra["tried"] = ",".join(action.tried)
        previous = fleet.placements.get(action.model)
        if action.kind == decide.LOAD:
            await self._load(action)
            log.info("placing model", extra=extra)
        elif action.kind == decide.UNLOAD:
            message = control.new_message(
                control.UNLOAD, action.model, target=action.worker, reason=action.reason
            )
            await control.send(self._r, message)
            self._unloading[(action.model, action.worker)] = clock.now_ms()
            log.info("unloading model copy", extra=extra)
        elif action.kind == decide.FAIL:
            await expected_models.record_load_error(
                self._r, action.model, action.worker or self.holder, action.message
            )
            await on_demand.end_placement(self._r, action.model)
            log.warning("model cannot be placed", extra=extra)
        elif action.kind == decide.END:
            await on_demand.end_placement(self._r, action.model)
            log.info("model placement ended", extra=extra)
        elif action.kind == decide.DROP:
            await self._r.hdel(keys.placements(), action.model)
            log.info("model placement waits for room", extra=extra)
        else:
            log.debug("model waits for room", extra=extra)
        if previous is not None and previous.message_id and action.kind != decide.WAIT:
            await self._r.delete(keys.control_acks(previous.message_id))

    async def _load(self, action: Action) -> None:
        """Record the placement, then send the load: a placer that dies between the two leaves
        a placement its successor follows (and times out), never a load nobody follows."""
        message = control.new_message(
            control.LOAD, action.model, target=action.worker, reason=action.reason
        )
        placement = on_demand.Placement(
            worker=action.worker,
            started_ms=clock.now_ms(),
            reason=action.reason,
            tried=list(action.tried),
            message_id=message.id,
        )
        await on_demand.write_placement(self._r, action.model, placement)
        if action.clear_error:
            await expected_models.clear_load_errors(self._r, [action.model])
        await control.send(self._r, message)
