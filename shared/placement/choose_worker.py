"""Which worker loads a model: memory fit first, then load.

The placer calls this with what the fleet's state says of each worker (its backends, memory
budget, resident models, load) and an estimate of the model's size (its last measured bytes,
else its files' size on disk). The rule, in order:

1. Only live workers that serve the model's backend, and not one in ``exclude`` (it already
   holds a copy, or this load failed there).
2. A worker where the model fits without unloading anything wins over any that must evict:
   an eviction costs a later cold start of the evicted model. Among those, best fit: the one
   left with the least free memory, so large holes stay free for large models (the classic
   best-fit rule against fragmentation of the fleet's memory); then the least loaded.
3. Otherwise the worker whose least-recently-used idle models make room while losing the
   least recent use: the newest ``last_used_ms`` among the models it would unload is the
   oldest of all workers' (the evicted models are the coldest the fleet can give up); then
   the fewest unloads; then the least loaded.
4. None: no such worker can hold it even after evicting all it may; the model waits.

Ties end on the worker id, so every placer picks the same worker from the same state.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from shared.placement import eviction
from shared.placement.eviction import Resident


@dataclass(frozen=True)
class WorkerView:
    """One worker as placement sees it.

    ``backends``: the backends it serves (a python worker serves several); ``load``: any
    non-negative figure of how busy it is, the same kind for every worker (e.g. batches in
    flight per instance); ``live``: its heartbeat has not expired.
    """

    id: str
    backends: frozenset[str]
    budget_bytes: int
    resident: tuple[Resident, ...] = ()
    load: float = 0.0
    live: bool = True

    @property
    def free_bytes(self) -> int:
        return self.budget_bytes - eviction.used_bytes(self.resident)


@dataclass(frozen=True)
class Choice:
    """The chosen worker and the models it is expected to unload first (empty: it fits)."""

    worker: str
    evict: tuple[Resident, ...] = ()


def plan(
    model_bytes_estimate: int,
    workers: Sequence[WorkerView],
    exclude: Collection[str] = frozenset(),
    *,
    backend: str,
) -> Choice | None:
    """The worker to load the model on and what it would evict; None: no worker can hold it.

    The worker decides its evictions again when the load arrives (:func:`eviction.choose` on
    its own, newer state); ``evict`` is what the placer expected, for logs and tests.
    """
    if model_bytes_estimate < 0:
        raise ValueError(
            f"model_bytes_estimate is {model_bytes_estimate}; expected a size of 0 or more"
        )
    candidates = [w for w in workers if w.live and backend in w.backends and w.id not in exclude]
    fitting = [w for w in candidates if model_bytes_estimate <= w.free_bytes]
    if fitting:
        best = min(fitting, key=lambda w: (w.free_bytes - model_bytes_estimate, w.load, w.id))
        return Choice(best.id)
    options: list[tuple[tuple[int, int, float, str], Choice]] = []
    for worker in candidates:
        victims = eviction.choose(worker.resident, model_bytes_estimate, worker.budget_bytes)
        if not victims:  # None: cannot fit there; [] cannot happen (it did not fit above)
            continue
        newest_lost = max(v.last_used_ms for v in victims)
        rank = (newest_lost, len(victims), worker.load, worker.id)
        options.append((rank, Choice(worker.id, tuple(victims))))
    if not options:
        return None
    return min(options, key=lambda option: option[0])[1]


def choose(
    model_bytes_estimate: int,
    workers: Sequence[WorkerView],
    exclude: Collection[str] = frozenset(),
    *,
    backend: str,
) -> str | None:
    """The id of the worker to load the model on (see the module's rule); None: none can."""
    choice = plan(model_bytes_estimate, workers, exclude, backend=backend)
    return choice.worker if choice is not None else None
