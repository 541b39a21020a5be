"""A gateway process's per-request metrics, counted once per event-loop turn.

Each answered request adds one to a counter and one observation to a histogram. In the gateway's
multiprocess mode every ``inc`` is a write to a memory-mapped file under a lock (and a
``getpid`` check), three per request: at c=64 a process answers a dozen or more requests in one
loop turn, so they are tallied here and written at the end of the turn, one ``inc`` per series
and per histogram bucket. The series read the same; a scrape, which is a request of a later
turn, sees every request answered before it.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from typing import Any

from shared.metrics import GATEWAY_REQUESTS, REQUEST_SECONDS, child

Answer = tuple[str, int, str, str, float]


def observe_many(histogram: Any, amounts: list[float]) -> None:
    """``histogram.observe(a)`` for every amount, with one write per bucket touched.

    prometheus_client's ``observe`` adds each amount to the sum and to the first bucket whose
    bound is not below it (buckets are cumulative only when exposed); this does the same in
    bulk. A child without those fields (another client release) is observed one by one."""
    bounds = getattr(histogram, "_upper_bounds", None)
    buckets = getattr(histogram, "_buckets", None)
    total = getattr(histogram, "_sum", None)
    if bounds is None or buckets is None or total is None or len(amounts) == 1:
        for amount in amounts:
            histogram.observe(amount)
        return
    counts: dict[int, int] = {}
    for amount in amounts:
        index = bisect_left(bounds, amount)  # the first bound >= amount (the last is +Inf)
        counts[index] = counts.get(index, 0) + 1
    total.inc(sum(amounts))
    for index, count in counts.items():
        buckets[index].inc(count)


class RequestTally:
    def __init__(self) -> None:
        self._answers: list[Answer] = []
        # The loop a flush is scheduled on. Compared by identity, so that answers left by a
        # loop that closed before its flush ran (tests run many loops in one process) go out
        # with the next loop's.
        self._scheduled: asyncio.AbstractEventLoop | None = None

    def record(self, model: str, version: int, arm: str, code: str, seconds: float) -> None:
        """One inference request answered (code "OK" or an error code), written at the end of
        this loop turn (at once when no loop runs)."""
        self._answers.append((model, version, arm, code, seconds))
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        if self._scheduled is not loop:
            self._scheduled = loop
            loop.call_soon(self.flush)

    def flush(self) -> None:
        self._scheduled = None
        answers, self._answers = self._answers, []
        if not answers:
            return
        counts: dict[tuple[str, int, str, str], int] = {}
        durations: dict[tuple[str, int], list[float]] = {}
        for model, version, arm, code, seconds in answers:
            key = (model, version, arm, code)
            counts[key] = counts.get(key, 0) + 1
            durations.setdefault((model, version), []).append(seconds)
        for (model, version, arm, code), count in counts.items():
            child(GATEWAY_REQUESTS, model, version, arm, code).inc(count)
        for (model, version), amounts in durations.items():
            observe_many(child(REQUEST_SECONDS, model, version), amounts)


_tally = RequestTally()
record_request = _tally.record
