"""The serving loop of one execution instance of a sequence model: the steps of the sequences
bound to it, one step per sequence at a time, in arrival order.

The admission script queues each step and rings the holder's doorbell. The loop reads the
marked sequences' head steps (or takes a step off its bell), lets the pure policy choose the
next execution, runs it, then publishes the replies and commits each step with its state in one
round trip (answered with each sequence's next head). States are cached here. Every reconcile
interval it releases idle sequences, re-reads what it holds and publishes its occupancy. A
cancelled step ends its sequence (``workers.sequence.cancels``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import redis.asyncio as aioredis

from shared import metrics
from shared.fleet.cancel_listener import CancelledRequests
from shared.model_config.sequences import SequenceSpec
from shared.wire import envelope
from workers.backend import ModelInstance
from workers.loading.loader import LoadedVersion
from workers.sequence import occupancy
from workers.sequence import state as state_codec
from workers.sequence.bells import read_bells
from workers.sequence.cancels import SequenceCancels
from workers.sequence.execution import Execute, Outcome, State, Step, StepRunner
from workers.sequence.policy import assign_slot, plan_direct, plan_oldest
from workers.sequence.starting_states import StartingStates
from workers.sequence.store import (
    ALREADY,
    COMMITTED,
    NOT_HOLDER,
    OUT_OF_ORDER,
    RELEASED,
    Head,
    SequenceStore,
)
from workers.settings import WorkerSettings

log = logging.getLogger(__name__)

# Binding and queue keys outlive the idle timeout by this much (see gateway admission).
TTL_MARGIN_MS = 600_000


class SequenceHolder:
    def __init__(
        self,
        redis: aioredis.Redis,
        settings: WorkerSettings,
        worker_id: str,
        loaded: LoadedVersion,
        instance: ModelInstance,
        index: int,
        spec: SequenceSpec,
        execute: Execute,
        heard: CancelledRequests | None = None,
    ):
        config = loaded.model.config
        self.settings = settings
        self.spec = spec
        self.model, self.version = config.name, loaded.version
        self.id = f"{worker_id}#{index}"
        self.store = SequenceStore(redis, config.name, loaded.version, self.id)
        self.idle_ms = max(1, spec.idle_us // 1000)
        self.ttl_ms = self.idle_ms + TTL_MARGIN_MS
        self.initial: State = {
            s.input_name: state_codec.initial_state(s, spec.batched, loaded.model.path)
            for s in spec.states
        }
        self.runner = StepRunner(config, loaded.version, spec, instance, self.initial, worker_id)
        self._execute = execute
        self.heads: dict[str, Head] = {}
        self.known: dict[str, int] = {}  # highest step seen per sequence
        self.dirty: dict[str, int] = {}  # sequences to read -> mark serial
        self._serial = 0
        self.starts = StartingStates(spec, self.initial, self.store)
        self.cache = self.starts.cache  # sequence -> (last committed step, its state)
        self.positions: dict[str, int] = {}  # direct strategy: each sequence's batch slot
        self.wake = asyncio.Event()
        self.held_count = self.backlog = self._ticks = 0
        self.cancels = SequenceCancels(redis, self.store, heard, self.idle_ms, spec.slots)

    async def serve(self, stopping: asyncio.Event, unloading: asyncio.Event) -> None:
        """Until the worker stops or the version is unloaded (each finishes its execution)."""
        await self.store.register(self.spec.slots)
        bells = asyncio.create_task(
            read_bells(self.settings.redis_url, self.store.bell_key, self._ring),
            name=f"bells-{self.id}",
        )
        interval_s = self.settings.sequence_reconcile_ms / 1000
        next_reconcile = 0.0
        try:
            while not stopping.is_set() and not unloading.is_set():
                self.wake.clear()
                wait_s = interval_s
                try:
                    if time.monotonic() >= next_reconcile:
                        await self.reconcile()
                        # An instance holding nothing, with nobody waiting, looks less often.
                        quiet = not self.held_count and not self.backlog and not self.heads
                        next_reconcile = time.monotonic() + interval_s * (4 if quiet else 1)
                    await self._read_dirty()
                    ran, wake_at_us = await self._step()
                    if ran:
                        continue
                    if wake_at_us is not None:
                        wait_s = max(0.0, min(wait_s, wake_at_us / 1e6 - time.time()))
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("sequence step failed", extra={"model": self.model})
                    wait_s = 0.2
                wait_s = min(wait_s, max(0.0, next_reconcile - time.monotonic()))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), wait_s)
        finally:
            bells.cancel()
            await asyncio.gather(bells, return_exceptions=True)
            occupancy.forget(self.model, self.version, self.id)

    async def hand_over(self) -> None:
        """A clean stop: the held sequences go to live instances now, not after the dead bound."""
        try:
            _, adopted, released, backlogged = await self.store.adopt(
                self.id, _now_ms(), 0, self.idle_ms, force=True
            )
        except Exception:
            log.exception("could not hand over the held sequences", extra={"model": self.model})
            return
        log.info(
            "held sequences handed over",
            extra={
                "model": self.model,
                "adopted": adopted,
                "released": released,
                "backlogged": backlogged,
            },
        )
        metrics.record_sequence_event(self.model, self.version, "idle_released", released)

    def _ring(self, sequence: str, step: int, payload: bytes | None) -> None:
        """A bell: a step is queued (``step`` 0: look anyway). The step right after the one
        committed here last is the queue's head: its copy on the bell is used, no read. Only
        a bell for the known head or before is dropped (a new sequence must not be lost)."""
        head = self.heads.get(sequence)
        if head is not None and 0 < step <= head.step:
            return
        cached = self.cache.get(sequence)
        if (
            payload is not None
            and head is None
            and cached is not None
            and cached[0] == step - 1 == self.known.get(sequence)
        ):
            self._set_head(Head(sequence, step, envelope.decode_request(payload)))
        else:
            self._mark(sequence)
        self.wake.set()

    def _mark(self, sequence: str) -> None:
        """Look at the sequence's queue; a read settles only the marks made before it."""
        self._serial += 1
        self.dirty[sequence] = self._serial

    async def _read_dirty(self) -> None:
        wanted = {s: mark for s, mark in self.dirty.items() if s not in self.heads}
        if not wanted:
            return
        found = await self.store.heads(list(wanted))
        for sequence, mark in wanted.items():
            if self.dirty.get(sequence) == mark:  # no bell came while reading
                del self.dirty[sequence]
            if sequence not in found:
                self.forget(sequence)  # another instance holds it now, or it is gone
            elif (head := found[sequence]) is not None:
                self._set_head(head)

    def _set_head(self, head: Head) -> None:
        self.heads[head.sequence] = head
        self.known[head.sequence] = max(self.known.get(head.sequence, 0), head.step)

    def forget(self, sequence: str) -> None:
        """Drop what this holder knows of a sequence, but not a mark to look at it again."""
        for table in (self.heads, self.known, self.cache, self.positions):
            table.pop(sequence, None)

    async def _step(self) -> tuple[bool, float | None]:
        """Run one execution if the policy says so; (ran, when to decide again)."""
        if not self.heads:
            return False, None
        now_us = time.time() * 1e6
        if self.spec.strategy == "direct":
            slots = self.spec.max_batch
            ready = {assign_slot(self.positions, s, slots): (s, h) for s, h in self.heads.items()}
            ready = {p: item for p, item in ready.items() if p < self.spec.max_batch}
            plan = plan_direct(ready, now_us, self.spec)
            if not plan.slots:
                return False, plan.wake_at_us
            chosen: list[Head | None] = [self.heads[s] if s else None for s in plan.slots]
        else:
            ordered = sorted(self.heads.values(), key=lambda h: (h.arrival_us, h.sequence))
            oldest = plan_oldest(ordered, now_us, self.spec)
            if not oldest.take:
                return False, oldest.wake_at_us
            chosen = list(ordered[: oldest.take])
        chosen = await self.cancels.drop(chosen, self.forget)  # a cancelled step ends it
        starts = await self.starts.for_heads([h for h in chosen if h is not None])
        for sequence in starts.lost:
            self.forget(sequence)
        for sequence in starts.stale:
            self.heads.pop(sequence, None)
            self._mark(sequence)
        states = starts.states
        positions = [
            Step(h, states[h.sequence]) if h is not None and h.sequence in states else None
            for h in chosen
        ]
        if not any(positions):
            return True, None
        outcome = await self.runner.run(positions, self._execute)
        await self._commit(outcome)
        await self.cancels.after_run(chosen, self.forget)
        return True, None

    async def _commit(self, outcome: Outcome) -> None:
        """Publish, then commit; retried until Redis takes it (the step stays unacknowledged)."""
        delay = 0.05
        while True:
            try:
                results, _pulled = await self.store.publish_and_commit(
                    outcome.replies,
                    outcome.commits,
                    outcome.stats,
                    _now_ms(),
                    self.idle_ms,
                    self.ttl_ms,
                    self.spec.slots,
                )
                break
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("sequence commit failed; retrying", extra={"model": self.model})
                await asyncio.sleep(delay)
                delay = min(1.0, delay * 2)
        committed = 0
        for commit, result in zip(outcome.commits, results, strict=True):
            sequence, step = commit.head.sequence, commit.head.step
            self.heads.pop(sequence, None)
            if result.code in (RELEASED, NOT_HOLDER):
                self.forget(sequence)
                event = "ended" if result.code == RELEASED else "commit_refused"
                metrics.record_sequence_event(self.model, self.version, event)
                committed += result.code == RELEASED
                continue
            if result.code == COMMITTED:
                self.cache[sequence] = (step, outcome.states[sequence])
                committed += 1
            elif result.code in (ALREADY, OUT_OF_ORDER):
                self.cache.pop(sequence, None)
            self.known[sequence] = max(self.known.get(sequence, 0), step)
            if result.following is not None:
                self._set_head(result.following)
        metrics.record_sequence_event(self.model, self.version, "state_committed", committed)
        if committed:
            metrics.record_batch(self.model, self.version, outcome.stats)

    async def reconcile(self) -> None:
        """Release idle sequences, re-read what is held here, publish the occupancy."""
        released, stale, held_list, backlog = await self.store.reconcile(
            _now_ms(), self.idle_ms, self.spec.slots
        )
        for sequence in (*released, *stale):
            self.forget(sequence)
        metrics.record_sequence_event(self.model, self.version, "idle_released", len(released))
        held = set(held_list)
        # Sequences that came here unseen are read now; the others (a bell lost, say) now and
        # then: reading every idle sequence on every tick would cost a round trip per held one.
        self._ticks += 1
        everything = self._ticks % 10 == 0
        for sequence in held:
            if sequence not in self.heads and (everything or sequence not in self.cache):
                self._mark(sequence)
        for sequence in list(self.cache) + list(self.positions):
            if sequence not in held and sequence not in self.heads:
                self.forget(sequence)
        self.held_count, self.backlog = len(held), backlog
        occupancy.update(self.model, self.version, self.id, len(held), self.spec.slots, backlog)


def _now_ms() -> int:
    return int(time.time() * 1000)
