"""Which requests found their model loaded: the client's view of each model's residency.

A model counts as loaded from the run's start when it was pre-loaded (``--load-model``), from
the moment any request for it is answered successfully (the server had it then), and from a
repository index sample that lists it READY; it counts as unloaded from an index sample that
does not list it. A request is *cold* when its model was not known to be loaded when it was
sent: its first request in the run, every request sent while that first load was still under
way, and the first ones after an eviction the index showed. Each unloaded -> loaded change is
one load. Pure: the client processes and the index monitor record, this module decides.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

# Event kinds, in the order they apply at the same instant: an answer or a sample before a
# request sent at that instant.
_ANSWERED, _SAMPLED, _SENT = 0, 1, 2


@dataclass(frozen=True)
class IndexSample:
    """The models the repository index listed READY at ``at`` (monotonic seconds)."""

    at: float
    ready: frozenset[int]


@dataclass(frozen=True)
class Residency:
    cold: npt.NDArray[np.bool_]  # per request, in the records' order
    loads: int  # unloaded -> loaded changes during the run
    evictions: int  # loaded -> unloaded changes the index showed


def classify(
    models: npt.NDArray[np.int64],
    sent: npt.NDArray[np.float64],
    latency: npt.NDArray[np.float64],
    ok: npt.NDArray[np.bool_],
    preloaded: Iterable[int] = (),
    samples: Sequence[IndexSample] = (),
) -> Residency:
    """Each request's coldness and the run's loads, from the requests (model, send time,
    latency, success) and the index samples."""
    events: list[tuple[float, int, int]] = []
    for i in range(len(models)):
        events.append((float(sent[i]), _SENT, i))
        if ok[i]:
            events.append((float(sent[i] + latency[i]), _ANSWERED, int(models[i])))
    events.extend((sample.at, _SAMPLED, k) for k, sample in enumerate(samples))
    heapq.heapify(events)
    loaded = set(preloaded)
    cold = np.zeros(len(models), dtype=np.bool_)
    loads = evictions = 0
    while events:
        _, kind, which = heapq.heappop(events)
        if kind == _SENT:
            cold[which] = int(models[which]) not in loaded
        elif kind == _ANSWERED:
            if which not in loaded:
                loaded.add(which)
                loads += 1
        else:
            ready = samples[which].ready
            loads += len(ready - loaded)
            evictions += len(loaded - ready)
            loaded = set(ready)
    return Residency(cold, loads, evictions)
