"""The requests of one version read from its request streams and not yet sent.

They wait in service order: priority, then arrival; a request delayed by a DELAY queue policy
goes behind the others of its level (``scheduler.queueing.expiry``), in the order the delays happen,
as Triton's delayed queue does. A request stays here until it has left its request stream
(dispatched or answered: ``remove``), so a redelivery of an entry still here is ignored; ids are
per stream, and the priority streams of a version share this set.

The work of one scheduling step does not grow with the backlog: each (priority, delayed) class
is an insertion-ordered dict (append, remove anywhere and read the head in O(1)), and deadlines
and queue timeouts wait in heaps with lazy deletion (a request that left is skipped when it
surfaces; the heaps are rebuilt when stale entries outnumber live ones), so a step reads the head
of the queue and the requests that are due, never the whole backlog.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass

from scheduler.queueing.expiry import DEADLINE_PASSED, QUEUE_TIMEOUT, queue_timeout_at
from shared import metrics
from shared.wire.envelope import RequestHeader

EntryKey = tuple[bytes, bytes]
# (priority, 1 once delayed by a DELAY queue policy else 0)
ClassKey = tuple[int, int]


@dataclass(eq=False)
class Pending:
    header: RequestHeader
    stream: bytes
    entry_id: bytes
    data: bytes
    arrival_us: float
    seq: int
    delayed: bool = False
    # Being answered with an error (expired): not for a batch; left once the answer went out.
    expiring: bool = False
    gone: bool = False

    @property
    def batch_size(self) -> int:
        return self.header.batch_size

    @property
    def shape_sig(self) -> str:
        return self.header.shape_sig

    @property
    def key(self) -> EntryKey:
        return (self.stream, self.entry_id)

    @property
    def class_key(self) -> ClassKey:
        return (self.header.priority, 1 if self.delayed else 0)


def arrival_us(header: RequestHeader) -> float:
    """When the request arrived, on this process's monotonic clock: its admission, when the
    header says (the batcher's delay then runs from there, not from this scheduler's read, which
    comes one stream hop later); now otherwise. A clock ahead of the admitting host's can only
    make the wait look longer (the batch goes sooner), never longer than the delay asked."""
    now_us = time.monotonic() * 1e6
    if not header.enqueued_us:
        return now_us
    return now_us - max(0.0, time.time_ns() / 1000 - header.enqueued_us)


class PendingRequests:
    def __init__(self) -> None:
        self._classes: dict[ClassKey, dict[EntryKey, Pending]] = {}
        self._order: list[ClassKey] = []  # sorted keys of _classes: service order
        self._held: dict[EntryKey, Pending] = {}
        # (ms, seq, request): heaps with lazy deletion.
        self._deadlines: list[tuple[float, int, Pending]] = []
        self._timeouts: list[tuple[float, int, Pending]] = []
        # Expired requests whose error answer failed: due again at the next step.
        self._retry: list[tuple[Pending, str]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._held)

    def holds(self, stream: bytes, entry_id: bytes) -> bool:
        return (stream, entry_id) in self._held

    def add(self, header: RequestHeader, stream: bytes, entry_id: bytes, data: bytes) -> bool:
        """Queue a request in service order; False if its entry is already here."""
        key = (stream, entry_id)
        if key in self._held:
            return False
        self._seq += 1
        item = Pending(header, stream, entry_id, data, arrival_us(header), self._seq)
        self._held[key] = item
        self._class(item.class_key)[key] = item
        heapq.heappush(self._deadlines, (float(header.deadline_ms), item.seq, item))
        timeout_at = queue_timeout_at(header)
        if timeout_at is not None:
            heapq.heappush(self._timeouts, (timeout_at, item.seq, item))
        return True

    def head(self, limit: int) -> list[Pending]:
        """The first ``limit`` requests in service order (those being expired left out)."""
        found: list[Pending] = []
        for class_key in self._order:
            for item in self._classes[class_key].values():
                if item.expiring:
                    continue
                found.append(item)
                if len(found) >= limit:
                    return found
        return found

    def remove(self, items: list[Pending]) -> None:
        """These requests have left their streams: a later entry with their id is a new one."""
        for item in items:
            if item.gone:
                continue
            item.gone = True
            self._held.pop(item.key, None)
            self._classes[item.class_key].pop(item.key, None)
        self._compact()

    def take_cancelled(self, request_ids: set[str]) -> list[Pending]:
        """The held requests with these ids, marked like expiring ones (no batch takes them)
        until ``remove`` once answered, or ``untake`` if the answer failed. A scan: cancels
        are rare, and the hot path keeps no index for them."""
        found = [
            item
            for item in self._held.values()
            if item.header.id in request_ids and not (item.gone or item.expiring)
        ]
        for item in found:
            item.expiring = True
        return found

    def untake(self, items: list[Pending]) -> None:
        """Their cancel answer failed: back in the queue (the next step tries again)."""
        for item in items:
            item.expiring = False

    def due(self, now_ms: float) -> list[tuple[Pending, str]]:
        """The requests that may no longer wait, each with its message; they stay here (marked
        ``expiring``) until ``remove`` once answered, or ``retry`` if the answer failed. A request
        past its queue timeout under DELAY is moved behind its level instead."""
        expired, self._retry = self._retry, []
        while self._deadlines and self._deadlines[0][0] <= now_ms:
            _, _, item = heapq.heappop(self._deadlines)
            if not (item.gone or item.expiring):
                item.expiring = True
                expired.append((item, DEADLINE_PASSED))
        while self._timeouts and self._timeouts[0][0] <= now_ms:
            _, _, item = heapq.heappop(self._timeouts)
            if item.gone or item.expiring or item.delayed:
                continue
            if item.header.delay_on_timeout:
                self._delay(item)
            else:
                item.expiring = True
                expired.append((item, QUEUE_TIMEOUT))
        return expired

    def retry(self, expired: list[tuple[Pending, str]]) -> None:
        """Their error answer failed: they are due again at the next step."""
        self._retry.extend((item, message) for item, message in expired if not item.gone)

    def next_expiry_ms(self) -> float | None:
        """When the next request becomes due (epoch ms), None when none will."""
        if self._retry:
            return 0.0
        soonest: float | None = None
        for heap in (self._deadlines, self._timeouts):
            while heap and (heap[0][2].gone or heap[0][2].expiring or _delayed(heap, self)):
                heapq.heappop(heap)
            if heap and (soonest is None or heap[0][0] < soonest):
                soonest = heap[0][0]
        return soonest

    def export(self, model: str, version: int, levels: list[int]) -> None:
        """Scrape hook: depth and oldest-entry age per priority, and Triton's pending count."""
        now_us = time.monotonic() * 1e6
        depth = dict.fromkeys(levels, 0)
        oldest = dict.fromkeys(levels, now_us)
        for (level, delayed), members in self._classes.items():
            depth[level] = depth.get(level, 0) + len(members)
            # Arrival order within a class, except delayed ones (in the order they were moved).
            firsts = members.values() if delayed else [next(iter(members.values()), None)]
            for item in firsts:
                if item is not None:
                    oldest[level] = min(oldest.get(level, now_us), item.arrival_us)
        for level, count in depth.items():
            metrics.child(metrics.QUEUE_DEPTH, model, version, level).set(count)
            age = (now_us - oldest[level]) / 1e6 if count else 0.0
            metrics.child(metrics.QUEUE_OLDEST_AGE, model, version, level).set(age)
        metrics.child(metrics.PENDING, model, version).set(len(self._held))

    # --- inside -------------------------------------------------------------------------------

    def _class(self, class_key: ClassKey) -> dict[EntryKey, Pending]:
        members = self._classes.get(class_key)
        if members is None:
            members = self._classes[class_key] = {}
            self._order = sorted(self._classes)
        return members

    def _delay(self, item: Pending) -> None:
        self._classes[item.class_key].pop(item.key, None)
        item.delayed = True
        self._class(item.class_key)[item.key] = item

    def _compact(self) -> None:
        """Drop the heaps' stale entries once they outnumber the live ones (amortised O(1))."""
        live = len(self._held)
        for name in ("_deadlines", "_timeouts"):
            heap: list[tuple[float, int, Pending]] = getattr(self, name)
            if len(heap) > 2 * live + 64:
                kept = [row for row in heap if not row[2].gone]
                heapq.heapify(kept)
                setattr(self, name, kept)


def _delayed(heap: list[tuple[float, int, Pending]], pending: PendingRequests) -> bool:
    """A delayed request's queue timeout no longer matters (only its deadline does)."""
    return heap is pending._timeouts and heap[0][2].delayed
