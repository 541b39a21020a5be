"""How many copies of a loaded model the fleet should hold: copies that follow traffic.

The placer evaluates :func:`wanted` for each model every tick and moves by at most one copy per
tick: a load is expensive (seconds, memory on another worker), and one more copy changes the
backlog the next tick sees, so stepping lets the effect of each copy show before the next.

Up: when the work waiting and executing is past what the current copies serve by more than
half a copy's worth (:data:`UP_MARGIN`). The margin is the hysteresis: a backlog that only
touches the copies' capacity (a brief burst the batcher absorbs) does not cost a load whose
copy would then sit idle until it is unloaded again.

Down: only when a copy has been idle for ``idle_unload_ms`` and nothing waits or executes;
never on a momentary dip, so a copy added under load is not dropped between two bursts and
loaded again (the flapping a threshold on the backlog alone would cause). Never below
``min_copies`` (``--model-min-copies``: 1 keeps a model loaded once it was asked for, 0 lets
it go entirely, the model staying loadable on demand); a pinned model (``--load-model``) never
below one.

The caller counts copies that are still loading in ``copies``, so that a copy on its way is
not asked for again at every tick until it is READY.
"""

from __future__ import annotations

from fractions import Fraction

# How far past the copies' capacity the backlog must be before one more copy is wanted, in
# copies' worth: 1/2 = half of one copy's capacity.
UP_MARGIN = Fraction(1, 2)


def _check(name: str, value: int, least: int) -> None:
    if value < least:
        raise ValueError(f"{name} is {value}; expected {least} or more")


def wanted(
    queue_depth: int,
    in_flight: int,
    copies: int,
    per_copy_capacity: int,
    idle_ms: int,
    idle_unload_ms: int,
    min_copies: int,
    pinned: bool,
) -> int:
    """The number of copies to hold: ``copies`` + 1, ``copies`` - 1 or ``copies``.

    ``queue_depth``: requests waiting in the model's queues; ``in_flight``: requests executing
    on its copies; ``per_copy_capacity``: requests one copy executes at once (its instances
    times the batch size it is given); ``idle_ms``: how long the least recently used copy has
    executed nothing; ``idle_unload_ms``: ``--model-idle-unload-seconds`` in ms, 0 or less
    never unloads for idleness. A model with no copy and no demand stays at none (indexed, not
    loaded) unless pinned; one with demand wants its first copy.
    """
    _check("queue_depth", queue_depth, 0)
    _check("in_flight", in_flight, 0)
    _check("copies", copies, 0)
    _check("per_copy_capacity", per_copy_capacity, 1)
    _check("min_copies", min_copies, 0)
    demand = queue_depth + in_flight
    if copies == 0:
        return 1 if demand > 0 or pinned else 0
    floor = max(min_copies, 1) if pinned else min_copies
    if copies < floor:
        return copies + 1
    if demand > (copies + UP_MARGIN) * per_copy_capacity:
        return copies + 1
    idle = demand == 0 and 0 < idle_unload_ms <= idle_ms
    if idle and copies > floor:
        return copies - 1
    return copies
