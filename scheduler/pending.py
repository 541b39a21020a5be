"""The requests of one version read from its request streams and not yet sent.

They wait in service order: priority, then arrival; a request delayed by a DELAY queue policy
goes behind the others of its level (``scheduler.expiry``). An entry id is kept until its
request has left the request stream (dispatched or answered), so a redelivery of an entry still
here is ignored; ids are per stream, and the priority streams of a version share this set.
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass, field

from shared import metrics
from shared.envelope import RequestHeader


@dataclass(order=True)
class Pending:
    # (priority, 1 once delayed by a DELAY queue policy else 0, arrival sequence)
    sort_key: tuple[int, int, int]
    header: RequestHeader = field(compare=False)
    stream: bytes = field(compare=False)
    entry_id: bytes = field(compare=False)
    data: bytes = field(compare=False)
    arrival_us: float = field(compare=False)

    @property
    def batch_size(self) -> int:
        return self.header.batch_size

    @property
    def shape_sig(self) -> str:
        return self.header.shape_sig


class PendingRequests:
    def __init__(self) -> None:
        # In service order; read by the batcher and the expiry rules.
        self.items: list[Pending] = []
        self._ids: set[tuple[bytes, bytes]] = set()
        self._seq = 0

    def __len__(self) -> int:
        return len(self.items)

    def add(self, header: RequestHeader, stream: bytes, entry_id: bytes, data: bytes) -> bool:
        """Queue a request in service order; False if its entry is already here."""
        if (stream, entry_id) in self._ids:
            return False
        self._seq += 1
        item = Pending(
            (header.priority, 0, self._seq),
            header,
            stream,
            entry_id,
            data,
            time.monotonic() * 1e6,
        )
        bisect.insort(self.items, item)
        self._ids.add((stream, entry_id))
        return True

    def take(self, count: int) -> list[Pending]:
        """Remove the first ``count`` requests; their ids stay until ``forget``."""
        chosen, self.items = self.items[:count], self.items[count:]
        return chosen

    def retain(self, keep: list[Pending]) -> None:
        """Keep only these requests, re-sorted (a delayed one moved behind its level)."""
        keep.sort()
        self.items = keep

    def forget(self, item: Pending) -> None:
        """The request has left its stream: a later entry with its id is a new request."""
        self._ids.discard((item.stream, item.entry_id))

    def export(self, model: str, version: int, levels: list[int]) -> None:
        """Scrape hook: depth and oldest-entry age per priority, and Triton's pending count."""
        now_us = time.monotonic() * 1e6
        depth = dict.fromkeys(levels, 0)
        oldest = dict.fromkeys(levels, now_us)
        for item in self.items:
            level = item.header.priority
            depth[level] = depth.get(level, 0) + 1
            oldest[level] = min(oldest.get(level, now_us), item.arrival_us)
        for level, count in depth.items():
            metrics.child(metrics.QUEUE_DEPTH, model, version, level).set(count)
            age = (now_us - oldest[level]) / 1e6 if count else 0.0
            metrics.child(metrics.QUEUE_OLDEST_AGE, model, version, level).set(age)
        metrics.child(metrics.PENDING, model, version).set(len(self.items))
