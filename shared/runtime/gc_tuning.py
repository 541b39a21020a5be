"""The garbage collector of a long-lived service process, set once it has started.

A gateway process holds about 100,000 objects after start-up (modules, the application, the
model table) that live as long as it does. Python's collector is generational: a full collection
walks every one of them, and under load a gateway process ran one every 2-3 s, each a pause of
60-250 ms (measured with ``gc.callbacks`` at c=64 on the 2-core bench machine) in which none of
its requests moved: the tail of the latency, not its median. Its young collections ran every
few requests (Python's default threshold: 700 net allocations of container objects, where a
request allocates a few hundred) and each walked the objects of every request then in flight.

``settle`` moves everything alive at start-up to the collector's permanent generation
(``gc.freeze``: never walked again, never freed; it would live anyway) and raises the young
generation's threshold, so young collections come about as often per second as before per
handful of requests. A request's own objects die by reference count (the hot path makes no
cycles), so the collector only ever has the rare cycle to find; memory held by uncollected
cyclic garbage is bounded by the threshold.
"""

from __future__ import annotations

import gc

# Net allocations of container objects between young collections (Python's default: 700).
DEFAULT_YOUNG_THRESHOLD = 20_000


def settle(young_threshold: int = DEFAULT_YOUNG_THRESHOLD) -> None:
    """Freeze what start-up left alive and set the young threshold (0: leave the collector as
    Python sets it)."""
    if young_threshold <= 0:
        return
    gc.collect()  # start-up's own cyclic garbage is freed, not frozen
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young_threshold, middle, old)


__all__ = ["DEFAULT_YOUNG_THRESHOLD", "settle"]
