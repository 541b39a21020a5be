"""What the serving loops of one version's instances on this worker share.

All instances of a version read its batch stream under this worker's one consumer name, so the
batches pending under that name are the version's lane: those being processed, those waiting to
be tried again, and any whose read answer was lost. ``held`` says which of them some loop of
this worker has in hand, so that recovering the others never hands a batch to two instances.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from shared.fleet import streams
from workers.batches.ordering import OrderGate


@dataclass
class Lane:
    # Batches to take before the stream's new ones: reclaimed from dead workers, recovered after
    # a lost read, or to be tried again after a failure.
    waiting: asyncio.Queue[streams.Entry] = field(default_factory=asyncio.Queue)
    # Entry ids in hand: being processed or waiting.
    held: set[bytes] = field(default_factory=set)
    # Set when the version stops being served: each loop finishes its batch and returns.
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    # Decoupled batches whose streams are still open (``workers.batches.stream_batch``).
    streaming: set[asyncio.Task[None]] = field(default_factory=set)
    # Each loop's way to end its blocking read at once (``shared.runtime.wakeable_read``): the reads
    # block long, so news for the loops (a batch to take, a stop) wakes them.
    wakers: set[Callable[[], None]] = field(default_factory=set)
    # ``preserve_ordering``: replies leave in batch-stream order (``workers.batches.ordering``).
    order: OrderGate = field(default_factory=OrderGate)

    def put(self, entry: streams.Entry) -> None:
        self.held.add(entry.entry_id)
        self.waiting.put_nowait(entry)
        self.wake()

    def wake(self) -> None:
        for wake in list(self.wakers):
            wake()
