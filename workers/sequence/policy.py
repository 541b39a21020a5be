"""Which queued steps of an instance's sequences run together next. Pure.

Only a sequence's head step is ever a candidate (one step at a time, in arrival order). Every
step has batch size 1, so a batch is a count of requests.

- **direct**: each held sequence has a batch position (its slot); an execution covers positions
  0..the highest ready one, and the positions without a ready step are padding (READY false), as
  in Triton, so a model that keeps state per batch slot sees each sequence in its own slot. It
  runs at once, or, with ``max_queue_delay_microseconds`` and ``minimum_slot_utilization`` set,
  when enough slots are ready or the oldest ready step has waited the delay.
- **oldest**: the ready heads, oldest first, batched like Triton's dynamic batcher (preferred
  sizes, ``max_queue_delay_microseconds``) up to ``max_batch_size``.

Steps whose input shapes differ from the first candidate's wait for a later execution.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from shared.model_config.sequences import SequenceSpec


class Candidate(Protocol):
    @property
    def sig(self) -> str: ...

    @property
    def arrival_us(self) -> float: ...


@dataclass(frozen=True)
class DirectPlan:
    # Batch positions 0..len(slots)-1: the candidate key at each position, None for padding.
    slots: list[str | None]
    wake_at_us: float | None = None


def plan_direct(
    ready: Mapping[int, tuple[str, Candidate]], now_us: float, spec: SequenceSpec
) -> DirectPlan:
    """``ready``: position -> (sequence, its head step)."""
    if not ready:
        return DirectPlan([])
    first = ready[min(ready)][1]
    chosen = {p: key for p, (key, c) in ready.items() if c.sig == first.sig}
    if spec.queue_delay_us > 0 and spec.min_slot_utilization > 0:
        earliest = min(ready[p][1].arrival_us for p in chosen)
        waited = now_us - earliest
        utilization = len(chosen) / spec.max_batch
        if waited <= spec.queue_delay_us and utilization < spec.min_slot_utilization:
            return DirectPlan([], earliest + spec.queue_delay_us)
    top = max(chosen)
    return DirectPlan([chosen.get(p) for p in range(top + 1)])


def assign_slot(positions: dict[str, int], sequence: str, slots: int) -> int:
    """The sequence's batch slot (direct strategy): the lowest free one, kept while it is held.
    With more sequences than slots (a release not yet seen here) it gets one past the slots and
    waits; it takes a real one as soon as one is free."""
    position = positions.get(sequence)
    if position is not None and position < slots:
        return position
    used = set(positions.values())
    free = next((p for p in range(slots) if p not in used), None)
    if free is None:
        free = slots + len(positions)
    positions[sequence] = free
    return free


@dataclass(frozen=True)
class OldestPlan:
    take: int
    wake_at_us: float | None = None


def plan_oldest(ordered: Sequence[Candidate], now_us: float, spec: SequenceSpec) -> OldestPlan:
    """``ordered``: the ready heads, oldest first; take a prefix of them (or wait)."""
    if not ordered:
        return OldestPlan(0)
    signature = ordered[0].sig
    count = 0
    preferred_count = 0
    preferred = set(spec.preferred_batch_sizes)
    for candidate in ordered:
        if candidate.sig != signature or count >= spec.max_batch:
            break
        count += 1
        if count in preferred:
            preferred_count = count
    can_grow = count < spec.max_batch and count == len(ordered)
    delay = spec.queue_delay_us
    oldest = ordered[0].arrival_us
    expired = delay > 0 and now_us - oldest >= delay
    if preferred_count and not expired:
        return OldestPlan(preferred_count)
    if expired or not can_grow or delay == 0 or (preferred and count >= max(preferred)):
        return OldestPlan(count)
    return OldestPlan(0, oldest + delay)
