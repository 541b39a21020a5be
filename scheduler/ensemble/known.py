"""What one scheduler knows of the ensemble requests it has touched: a subset of their state.

Redis holds each request's state (``scheduler.ensemble.scripts``); a scheduler that started a
request or recorded one of its steps keeps a copy of what it read and wrote, so that it can plan
the next steps when a step's reply comes in *before* writing it: the step's record, the next
steps' admissions and the reply's ack then go in one pipeline (one round trip per step).

The copy is only ever a subset of the state in Redis (the state only grows until it is deleted),
so a plan made from it never runs a step too early; it may miss a step that another scheduler's
record made runnable, which the STEP script detects (the state's size differs from the copy's)
and answers with the whole state. A copy that a failed write may have made wrong is dropped;
copies of requests finished elsewhere go at their deadline.
"""

from __future__ import annotations

import heapq

from shared.wire.envelope import InferRequest

State = dict[bytes, bytes]


class KnownStates:
    def __init__(self) -> None:
        self._known: dict[str, tuple[InferRequest, State]] = {}
        self._deadlines: list[tuple[int, str]] = []

    def __len__(self) -> int:
        return len(self._known)

    def get(self, request_id: str) -> tuple[InferRequest, State] | None:
        return self._known.get(request_id)

    def put(self, request: InferRequest, state: State, now_ms: int) -> None:
        if request.id not in self._known:
            heapq.heappush(self._deadlines, (request.deadline_ms, request.id))
        self._known[request.id] = (request, state)
        self._prune(now_ms)

    def merged(self, request: InferRequest, state: State, now_ms: int) -> State:
        """The state read from Redis with what this scheduler wrote since (its own pipelines
        still in flight), kept as the new copy."""
        known = self._known.get(request.id)
        whole = {**known[1], **state} if known is not None else dict(state)
        self.put(request, whole, now_ms)
        return whole

    def drop(self, request_id: str) -> None:
        self._known.pop(request_id, None)

    def _prune(self, now_ms: int) -> None:
        while self._deadlines and self._deadlines[0][0] < now_ms:
            _, request_id = heapq.heappop(self._deadlines)
            known = self._known.get(request_id)
            if known is not None and known[0].deadline_ms < now_ms:
                del self._known[request_id]

    def clear(self) -> None:
        self._known.clear()
        self._deadlines.clear()
