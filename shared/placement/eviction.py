"""Which of a worker's loaded models to unload so that another fits its memory budget.

Least recently used first, the rule of every cache whose requests follow a skewed popularity
(a Zipf mix): the model not asked for the longest is the one least likely to be asked next.
Three kinds of model are never chosen, whatever their age:

- pinned (``--load-model``): the operator asked for it to stay;
- executing (a batch in flight): unloading it would fail requests already admitted;
- holding a live sequence: the sequence's state lives in the instance; unloading it would end
  the sequence for its client (the sequence's crash safety recovers a dead worker's sequences,
  not ones dropped on purpose).

Eviction is all or nothing: :func:`choose` answers None when the model cannot fit even after
every evictable model is gone, so the worker unloads nothing for a load it cannot take and the
caller places the model elsewhere instead of emptying this worker in vain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Resident:
    """One model loaded on a worker, as eviction and placement see it.

    ``model``: the name the worker's resident set is keyed by (the model, or model/version
    where versions are placed separately); ``bytes``: its measured size; ``last_used_ms``: when
    it last executed a batch (its load time until then), any monotone clock shared by the set.
    """

    model: str
    bytes: int
    last_used_ms: int
    pinned: bool = False
    in_flight: int = 0
    live_sequences: int = 0

    @property
    def evictable(self) -> bool:
        return not self.pinned and self.in_flight == 0 and self.live_sequences == 0


def used_bytes(resident: Sequence[Resident]) -> int:
    return sum(r.bytes for r in resident)


def eviction_order(resident: Sequence[Resident]) -> list[Resident]:
    """The evictable models, first to go first: least recently used; among models last used
    at the same moment the larger one (fewer unloads free the room), then by name, so that
    every worker and every test sees the same order."""
    return sorted(
        (r for r in resident if r.evictable), key=lambda r: (r.last_used_ms, -r.bytes, r.model)
    )


def choose(
    resident: Sequence[Resident], need_bytes: int, budget_bytes: int
) -> list[Resident] | None:
    """The models to unload, in order, so that ``need_bytes`` more fit in ``budget_bytes``.

    ``[]``: it fits already. None: it cannot fit even with every evictable model unloaded (too
    big for the budget, or the room is held by pinned, executing or sequence-holding models).
    Strictly LRU: the oldest go first even when a younger, larger one alone would make room,
    because the younger one is the likelier to be asked for again; a resident set already over
    its budget (a model grew after it was measured) is brought back under it too.
    """
    if need_bytes < 0:
        raise ValueError(f"need_bytes is {need_bytes}; expected a size of 0 or more")
    free = budget_bytes - used_bytes(resident)
    if need_bytes <= free:
        return []
    chosen: list[Resident] = []
    for victim in eviction_order(resident):
        chosen.append(victim)
        free += victim.bytes
        if need_bytes <= free:
            return chosen
    return None
