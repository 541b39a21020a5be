"""Where an instance's executions run: on a pool thread, or inline on the loop when they are quick.

A batch handed to a pool thread pays for two thread wake-ups (the pool's queue, then the loop's
self-pipe when the result is back) and the futures that carry it; for a small model on a busy
2-core machine that hand-off costs as much CPU as the model itself. An instance whose recent
executions were quicker than ``inline_us`` (``CONCH_WORKER_INLINE_EXECUTION_US``) runs its next one
on the event loop's own thread instead: the loop is blocked for at most about that long, which a
worker serving quick models can afford. The cost: while one instance runs inline, no other instance
of this worker can start, so executions that the pool would run side by side on free cores run one
after the other. That is why ``auto`` (-1, the default) runs inline only where the worker may use
at most ``AUTO_MAX_CPUS`` CPUs (``shared.runtime.cpu_budget``: affinity and cgroup quota), where the
cores are shared by the whole mesh anyway and the hand-off's CPU is what matters; elsewhere the
pool, unless the setting gives a bound. A slow execution (a cold cache, a larger batch) moves the
instance back to the pool until its average is quick again, so a slow model never holds the loop.
Only tensor backends (``TensorModelInstance``) run inline; Python models, decoupled models and
sequence holders always use the pool.

The executions running on the pool are tracked per instance so that an instance is never
unloaded while ``execute`` runs on it (``wait_idle``); an inline execution ends before the loop
can unload anything. Averages are kept by instance identity; an unloaded instance's entry is
small and is overwritten if a new instance reuses its id.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from shared.runtime import cpu_budget
from workers.backend import ModelInstance, TensorModelInstance

# Weight of the newest execution in an instance's running average.
_WEIGHT = 0.25
# ``auto``: executions quicker than this run inline where the worker has at most AUTO_MAX_CPUS.
AUTO_INLINE_US = 2000
AUTO_MAX_CPUS = 2


def inline_bound_us(setting: int, cpus: int | None = None) -> int:
    """The bound the setting gives: itself when >= 0, else (``auto``) AUTO_INLINE_US on a
    worker with at most AUTO_MAX_CPUS CPUs and 0 (always the pool) on a larger one."""
    if setting >= 0:
        return setting
    cpus = cpu_budget.available_cpus() if cpus is None else cpus
    return AUTO_INLINE_US if cpus <= AUTO_MAX_CPUS else 0


class Executions:
    def __init__(self, inline_us: int = 0):
        self.inline_us = inline_us
        # Set by the service once the start-up versions are loaded (sized by their instances).
        self.pool: ThreadPoolExecutor | None = None
        # Instance (by identity) -> its execution running on the pool.
        self.running: dict[int, concurrent.futures.Future[Any]] = {}
        # Instance (by identity) -> running average of its executions' duration, in us.
        self._average_us: dict[int, float] = {}

    def inline(self, instance: ModelInstance) -> bool:
        """Whether ``instance``'s next execution runs on the loop: a tensor backend whose
        recent executions were quick (the first one goes to the pool, to be timed there)."""
        if not self.inline_us or not isinstance(instance, TensorModelInstance):
            return False
        average = self._average_us.get(id(instance))
        return average is not None and average < self.inline_us

    async def run(
        self,
        instance: ModelInstance,
        function: Callable[..., Any],
        *args: Any,
        on_done: Callable[[], None] | None = None,
        timed: bool = False,
    ) -> Any:
        """``function(*args)`` as ``instance``'s execution; ``on_done`` runs when it ended
        (on the pool's thread for a pooled one). ``timed``: the duration feeds the choice of
        inline or pool (tensor executions)."""
        if timed and self.inline(instance):
            started = time.perf_counter()
            try:
                return function(*args)
            finally:
                self._record(instance, started)
                if on_done is not None:
                    on_done()
        assert self.pool is not None, "the service sizes the executor before serving"
        started = time.perf_counter()
        running = self.pool.submit(function, *args)
        self.running[id(instance)] = running

        def finished(done: concurrent.futures.Future[Any]) -> None:  # on the pool's thread
            if on_done is not None:
                on_done()
            if self.running.get(id(instance)) is done:
                del self.running[id(instance)]

        running.add_done_callback(finished)
        result = await asyncio.wrap_future(running)
        if timed and self.inline_us:
            self._record(instance, started)
        return result

    def _record(self, instance: ModelInstance, started: float) -> None:
        took_us = (time.perf_counter() - started) * 1e6
        previous = self._average_us.get(id(instance))
        self._average_us[id(instance)] = (
            took_us if previous is None else previous + _WEIGHT * (took_us - previous)
        )

    async def wait_idle(
        self, instances: list[ModelInstance], timeout_s: float | None = None
    ) -> list[ModelInstance]:
        """Wait until none of these instances executes on the pool; returns those still
        executing when ``timeout_s`` ran out (a cancelled serving task leaves one running)."""
        running = [f for i in instances if (f := self.running.get(id(i))) is not None]
        if running:
            await asyncio.wait([asyncio.wrap_future(f) for f in running], timeout=timeout_s)
        return [i for i in instances if (f := self.running.get(id(i))) and not f.done()]
