"""The on_demand placer's policy in one pure function: the fleet's state in, actions out.

The placer (``scheduler.placement.placer``) reads everything a decision needs into a
:class:`Fleet` once per tick, calls :func:`decide` and carries the actions out; keeping the
policy free of Redis lets every branch be tested from a literal state, and lets the loop around
it be dumb (read, decide, write).

At most one action per model per tick, in this order of concern:

1. A load in progress (:class:`~shared.fleet.on_demand.Placement`): its worker's answer ends
   it (OK: loaded; an error: the worker recorded the load error), except "no room", which
   places it on another worker. A worker that holds the model is done even if its answer was
   lost. No answer from a worker whose heartbeat expired, or for longer than the load timeout:
   placed again elsewhere (reason retry), the failed workers remembered in ``tried``.
2. A demand without a placement: the model already ready (or held by a live worker) ends the
   demand; a load error recorded after the demand answers it; else a worker is chosen by
   :func:`shared.placement.choose_worker.plan` (memory fit first, then load). No live worker
   serves the model's backend for ``NO_WORKER_GRACE_MS``: a load error (a stalled heartbeat is
   not a missing backend). Workers serve it but none has room: the demand waits.
3. Copies of every model held by a live worker: :func:`shared.placement.copies.wanted` says +1
   (a load on a worker without it) or -1 (an unload of the unpinned copy idle longest).

Loads chosen earlier in the tick and those in progress take their estimated bytes on their worker
(not evictable): two demands of one tick do not both count on the same free memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from shared.fleet import on_demand
from shared.fleet.control import ACK_ERROR, ACK_OK, ControlAck, IndexEntry
from shared.fleet.on_demand import Placement, Resident
from shared.model_config.defaults import WORKER_BACKENDS
from shared.placement import choose_worker, copies, eviction

LOAD = "load"  # send a targeted LOAD (write the placement first)
UNLOAD = "unload"  # send a targeted UNLOAD
END = "end"  # the load is over (or not needed): remove the placement and the demand
FAIL = "fail"  # record a load error for the model, then END
DROP = "drop"  # remove the placement only: the demand waits for a worker with room
WAIT = "wait"  # nothing to do now (logged): no room anywhere yet

UNLIMITED = 1 << 62  # the budget of a worker that publishes none (0)
NO_WORKER_GRACE_MS = 10_000  # a demand waits this long for a worker of its backend to be live
NO_ROOM = "no room"  # an ack's message that means "try another worker" (no room there)


@dataclass(frozen=True)
class WorkerInfo:
    """A live worker as its heartbeat describes it."""

    backend: str
    budget_bytes: int = 0


@dataclass(frozen=True)
class Fleet:
    """Everything one tick decides from (all of it read at about the same time)."""

    now_ms: int
    # model -> ms of its first unanswered request
    demands: Mapping[str, int] = field(default_factory=dict)
    placements: Mapping[str, Placement] = field(default_factory=dict)
    index: Mapping[str, IndexEntry] = field(default_factory=dict)
    # model -> measured bytes of its last load
    measured: Mapping[str, int] = field(default_factory=dict)
    # live workers only (heartbeat not expired)
    workers: Mapping[str, WorkerInfo] = field(default_factory=dict)
    # worker -> model -> what it holds
    resident: Mapping[str, Mapping[str, Resident]] = field(default_factory=dict)
    # model -> ms its load error was recorded
    load_errors: Mapping[str, int] = field(default_factory=dict)
    # models with a version ready on a live worker
    ready: frozenset[str] = frozenset()
    # model -> requests waiting in the schedulers' queues
    backlog: Mapping[str, int] = field(default_factory=dict)
    # model -> answers to its placement's message
    acks: Mapping[str, list[ControlAck]] = field(default_factory=dict)
    # (model, worker) unloads sent and not yet seen done: not counted, not sent again
    unloading: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Policy:
    load_timeout_ms: int
    idle_unload_ms: int
    min_copies: int


@dataclass(frozen=True)
class Action:
    kind: str
    model: str
    worker: str = ""
    reason: str = ""
    tried: tuple[str, ...] = ()
    # FAIL: the load error; others: why, for the log
    message: str = ""
    # LOAD of a demand: an older load error is cleared (this is a new attempt)
    clear_error: bool = False


def serves(worker_backend: str, model_backend: str) -> bool:
    """A worker serves its own backend; a python worker also serves every Python-based
    backend (any backend without a worker service of its own)."""
    if worker_backend == model_backend:
        return True
    return worker_backend == "python" and model_backend not in WORKER_BACKENDS


class _Tick:
    """One decision pass: the fleet plus what this pass has already committed."""

    def __init__(self, fleet: Fleet, policy: Policy):
        self.fleet, self.policy = fleet, policy
        self.actions: list[Action] = []
        # worker -> loads it is expected to take (in progress or chosen in this pass)
        self.pending: dict[str, list[eviction.Resident]] = {}
        for model, placement in fleet.placements.items():
            self._reserve(placement.worker, model)

    def estimate(self, model: str) -> int:
        entry = self.fleet.index.get(model)
        return self.fleet.measured.get(model, entry.files_bytes if entry else 0)

    def _reserve(self, worker: str, model: str) -> None:
        loading = eviction.Resident(model, self.estimate(model), self.fleet.now_ms, in_flight=1)
        self.pending.setdefault(worker, []).append(loading)

    def holders(self, model: str) -> list[str]:
        return sorted(
            w
            for w in self.fleet.workers
            if model in self.fleet.resident.get(w, {}) and (model, w) not in self.fleet.unloading
        )

    def views(self, backend: str) -> list[choose_worker.WorkerView]:
        views = []
        for worker, info in sorted(self.fleet.workers.items()):
            held = self.fleet.resident.get(worker, {})
            resident = [
                eviction.Resident(
                    m, r.bytes, r.last_used_ms, r.pinned, r.in_flight, r.live_sequences
                )
                for m, r in sorted(held.items())
            ]
            resident += self.pending.get(worker, [])
            views.append(
                choose_worker.WorkerView(
                    worker,
                    frozenset({backend}) if serves(info.backend, backend) else frozenset(),
                    info.budget_bytes if info.budget_bytes > 0 else UNLIMITED,
                    tuple(resident),
                    load=float(sum(r.in_flight for r in held.values())),
                )
            )
        return views

    def add(self, action: Action) -> None:
        self.actions.append(action)

    def place(
        self, model: str, reason: str, tried: tuple[str, ...], failed: str, absent: str = ""
    ) -> Action:
        """A LOAD on the best worker; ``failed`` (``absent`` where no live worker serves the
        backend) when none is left to try; WAIT (DROP, when moving) when none has room now."""
        entry = self.fleet.index.get(model)
        if entry is None or entry.error or not entry.backend:
            known = entry.error if entry else f"model '{model}' is not in the repository index"
            return Action(failed, model, message=known or f"model '{model}' names no backend")
        backend = entry.backend
        views = self.views(backend)
        serving = [v.id for v in views if v.backends]
        if not serving:
            return Action(
                absent or failed,
                model,
                tried=tried,
                message=f"no live worker serves backend '{backend}' of model '{model}'; "
                f"expected a worker started with backend '{backend}'",
            )
        leaving = {w for m, w in self.fleet.unloading if m == model}
        exclude = set(tried) | set(self.holders(model)) | leaving
        if not [w for w in serving if w not in exclude]:
            return Action(
                failed,
                model,
                tried=tried,
                message=f"no room for model '{model}' on any live worker of backend "
                f"'{backend}' (tried {', '.join(tried) or 'none'})",
            )
        choice = choose_worker.plan(self.estimate(model), views, exclude, backend=backend)
        if choice is None:
            why = f"no live worker of backend '{backend}' has room for model '{model}' now"
            return Action(DROP if tried else WAIT, model, tried=tried, message=why)
        self._reserve(choice.worker, model)
        evict = ", ".join(r.model for r in choice.evict)
        return Action(
            LOAD,
            model,
            worker=choice.worker,
            reason=reason,
            tried=tried,
            message=f"evicting {evict}" if evict else "fits",
        )


def decide(fleet: Fleet, policy: Policy) -> list[Action]:
    """The actions of one tick (at most one per model), in a deterministic order."""
    tick = _Tick(fleet, policy)
    acted: set[str] = set()
    for model, placement in sorted(fleet.placements.items()):
        action = _follow(tick, model, placement)
        if action is not None:
            tick.add(action)
            acted.add(model)
    for model, since in sorted(fleet.demands.items(), key=lambda item: (item[1], item[0])):
        if model in fleet.placements or model in acted:
            continue
        tick.add(_serve_demand(tick, model, since))
        acted.add(model)
    for model in sorted({m for w in fleet.workers for m in fleet.resident.get(w, {})}):
        if model in acted or model in fleet.placements or model in fleet.demands:
            continue
        action = _copies(tick, model)
        if action is not None:
            tick.add(action)
    return tick.actions


def _follow(tick: _Tick, model: str, placement: Placement) -> Action | None:
    """A load in progress: done, failed, moved, or still waited for (None)."""
    fleet = tick.fleet
    worker = placement.worker
    failed = FAIL if placement.reason != on_demand.LOAD_COPY else END
    acks = [a for a in fleet.acks.get(model, []) if a.worker == worker]
    tried = (*placement.tried, worker)
    for ack in acks:
        if ack.status == ACK_OK:
            return Action(END, model, worker, placement.reason, message="loaded")
        if ack.status == ACK_ERROR and ack.message.startswith(NO_ROOM):
            return tick.place(model, placement.reason, tried, failed)
        if ack.status == ACK_ERROR:
            return Action(END, model, worker, placement.reason, message=ack.message)
    if worker in fleet.workers and model in fleet.resident.get(worker, {}):
        return Action(END, model, worker, placement.reason, message="held (answer not seen)")
    since = fleet.demands.get(model, placement.started_ms)  # no worker left: wait the grace
    absent = DROP if fleet.now_ms - since < NO_WORKER_GRACE_MS else failed
    late = fleet.now_ms - placement.started_ms > tick.policy.load_timeout_ms
    if worker not in fleet.workers or late:
        return tick.place(model, on_demand.LOAD_RETRY, tried, failed, absent)
    return None


def _serve_demand(tick: _Tick, model: str, since: int) -> Action:
    fleet = tick.fleet
    if model in fleet.ready or tick.holders(model):
        return Action(END, model, message="ready")
    error_ms = fleet.load_errors.get(model)
    if error_ms is not None and error_ms >= since:
        return Action(END, model, message="load failed")
    absent = WAIT if fleet.now_ms - since < NO_WORKER_GRACE_MS else FAIL  # a stall, maybe
    action = tick.place(model, on_demand.LOAD_DEMAND, (), FAIL, absent)
    return replace(action, clear_error=error_ms is not None) if action.kind == LOAD else action


def _copies(tick: _Tick, model: str) -> Action | None:
    fleet, policy = tick.fleet, tick.policy
    holders = tick.holders(model)
    if not holders:
        return None
    held = [fleet.resident[w][model] for w in holders]
    unpinned = [(r.last_used_ms, w) for w, r in zip(holders, held, strict=True) if not r.pinned]
    idle_ms = fleet.now_ms - min(unpinned)[0] if unpinned else 0
    want = copies.wanted(
        queue_depth=max(0, fleet.backlog.get(model, 0)),
        in_flight=sum(max(0, r.in_flight) for r in held),
        copies=len(holders),
        per_copy_capacity=max(1, min(r.capacity for r in held)),
        idle_ms=max(0, idle_ms),
        idle_unload_ms=policy.idle_unload_ms,
        min_copies=policy.min_copies,
        pinned=any(r.pinned for r in held),
    )
    if want > len(holders):
        action = tick.place(model, on_demand.LOAD_COPY, (), WAIT)
        return action if action.kind == LOAD else None
    if want < len(holders):
        victims = [
            (used, w)
            for used, w in unpinned
            if fleet.resident[w][model].in_flight == 0
            and fleet.resident[w][model].live_sequences == 0
        ]
        if victims:
            idle = f"idle {idle_ms} ms"
            return Action(UNLOAD, model, min(victims)[1], on_demand.UNLOAD_IDLE, message=idle)
    return None
