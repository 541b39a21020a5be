"""Which state each step starts from: the initial state on START, else the state committed by
the step before, from the holder's cache or, for a sequence that just arrived here (adopted,
pulled from the backlog, or after a failed commit), from Redis."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from shared.model_config.sequences import SequenceSpec
from shared.wire import sequence_params
from shared.wire.sequence_params import FLAG_START
from workers.sequence import state as state_codec
from workers.sequence.execution import State
from workers.sequence.store import Head, SequenceStore

log = logging.getLogger(__name__)


@dataclass
class Starts:
    states: dict[str, State] = field(default_factory=dict)
    # Sequences another instance holds now, and heads that are not the next step (read again).
    lost: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)


class StartingStates:
    def __init__(self, spec: SequenceSpec, initial: State, store: SequenceStore):
        self.spec = spec
        self.initial = initial
        self.store = store
        # sequence -> (last committed step, the state after it)
        self.cache: dict[str, tuple[int, State]] = {}

    async def for_heads(self, heads: list[Head]) -> Starts:
        starts = Starts()
        missing: list[Head] = []
        for head in heads:
            flags = sequence_params.lenient(head.request.parameters).flags
            cached = self.cache.get(head.sequence)
            if flags & FLAG_START:
                starts.states[head.sequence] = {k: v.copy() for k, v in self.initial.items()}
            elif not self.spec.states or (cached is not None and cached[0] == head.step - 1):
                starts.states[head.sequence] = cached[1] if cached else {}
            else:
                missing.append(head)
        if not missing:
            return starts
        found = await self.store.states([h.sequence for h in missing])
        for head in missing:
            holder, committed, fields = found[head.sequence]
            if holder != self.store.instance:
                starts.lost.append(head.sequence)
            elif committed != head.step - 1:
                log.warning(
                    "sequence head is not the step after the committed one; reading it again",
                    extra={"model": self.store.model, "step": head.step, "committed": committed},
                )
                starts.stale.append(head.sequence)
            else:
                starts.states[head.sequence] = self._decode(fields)
        return starts

    def _decode(self, fields: dict[bytes, bytes]) -> State:
        state: State = {}
        for spec in self.spec.states:
            data = fields.get(f"st:{spec.input_name}".encode())
            shape = fields.get(f"sh:{spec.input_name}".encode())
            if data is None or shape is None:
                state[spec.input_name] = self.initial[spec.input_name].copy()
            else:
                state[spec.input_name] = state_codec.decode(spec, data, shape.decode())
        return state
