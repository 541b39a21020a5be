"""``dynamic_batching.preserve_ordering`` on one worker: a version's batches publish their
replies in the order of the batch stream, whatever order their executions finish in.

Triton's promise is per server: with several instances running batches at once, responses still
leave in the order the requests arrived. A worker's instances read one version's batch stream,
whose entries the scheduler appends in arrival order; each batch enters the gate when read and
publishes only once every earlier batch this worker holds has published (or failed). Across
workers the mesh promises nothing more than Triton does across servers (docs/batching.md).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Iterator
from typing import Any

from shared.model_config import ModelConfig


def preserves_order(config: ModelConfig) -> bool:
    """``dynamic_batching.preserve_ordering`` (a decoupled model's streams are not held)."""
    batching = config.dynamic_batching
    return batching is not None and batching.preserve_ordering and not config.decoupled


def _position(entry_id: bytes) -> tuple[int, int]:
    millis, _, sequence = entry_id.partition(b"-")
    return int(millis), int(sequence or 0)


class OrderGate:
    def __init__(self) -> None:
        self._held: set[bytes] = set()
        self._changed = asyncio.Event()

    def enter(self, config: ModelConfig, entry_id: bytes) -> bool:
        """A batch was read; when the model preserves ordering, later batches wait for it
        (idempotent). Returns whether it does."""
        ordered = preserves_order(config)
        if ordered:
            self._held.add(entry_id)
        return ordered

    @contextlib.contextmanager
    def entered(self, config: ModelConfig, entry_id: bytes) -> Iterator[bool]:
        """``enter`` for the block; the batch leaves at its end, however it ends."""
        try:
            yield self.enter(config, entry_id)
        finally:
            self.leave(entry_id)

    def leave(self, entry_id: bytes) -> None:
        """The batch published its replies (or will not): later batches may go."""
        if entry_id in self._held:
            self._held.discard(entry_id)
            self._changed.set()
            self._changed = asyncio.Event()

    def earlier(self, entry_id: bytes) -> bool:
        mine = _position(entry_id)
        return any(_position(other) < mine for other in self._held)

    async def turn(self, entry_id: bytes) -> None:
        """Return once no earlier batch is held."""
        while self.earlier(entry_id):
            await self._changed.wait()

    async def in_turn(self, entry_id: bytes, send: Coroutine[Any, Any, None]) -> None:
        """Run ``send`` (a batch's replies) once no earlier batch is held."""
        try:
            await self.turn(entry_id)
        except BaseException:
            send.close()  # never started
            raise
        await send
