"""The ensemble runner's two kinds of work, each one pipeline (one round trip) for everything one
read brought: new requests, and step replies.

Both plan from what the scheduler knows of each request (``scheduler.ensemble.known``) before
writing, so that the writes that make a step's progress go together, in this order:

- new requests: START (the state, with the children of the first steps), then the first steps'
  admissions (the state exists before any step can answer; on Redis Cluster, where a pipeline's
  parts on different nodes run in no set order, START is a round trip of its own first);
- step replies: the next steps' admissions, the answers and one FINISH for the requests done,
  then one STEP per step-stream entry (records the replies' outputs and the children, acks the
  entry). The entry is acked after the admissions it caused: a scheduler that dies in between
  leaves it pending for a live one. Should a next step answer before its predecessor's STEP ran,
  whichever STEP runs second sees a state it did not expect and plans again from it.

When a script answers a state the plan did not know (a request resumed from a dead scheduler,
a parallel branch recorded by another scheduler, a request this scheduler never saw), the runner
plans again from it and writes what that adds in a second pipeline, with the entries left unacked.
"""

from __future__ import annotations

import logging

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline

from scheduler.ensemble import scripts
from scheduler.ensemble.known import KnownStates
from scheduler.ensemble.progress import (
    Action,
    EnsembleProgress,
    children_of,
    renamed,
)
from shared.fleet import streams
from shared.model_config.ensemble_graph import Step
from shared.wire import envelope, keys
from shared.wire.envelope import InferRequest, Reply, RequestHeader
from shared.wire.errors import ErrorCode

log = logging.getLogger(__name__)

# A state outlives its request's deadline by this much, so that the owner can still answer it.
KEEP_AFTER_DEADLINE_MS = 30_000

Arrival = tuple[RequestHeader, bytes, bytes, bytes]
# A step reply whose outcome STEP answers: the reply, its step, the request (None: not known).
Pending = tuple[Reply, Step, str]


class EnsembleWork:
    def __init__(self, progress: EnsembleProgress, known: KnownStates):
        self.progress = progress
        self.known = known
        self.model = progress.model
        self.steps_stream = progress.steps_stream
        # On Redis Cluster the admissions (the composing models' slots) and START (the
        # ensemble's) are on different nodes, whose parts of one pipeline run in no set order.
        self._cluster = isinstance(progress.redis, aioredis.RedisCluster)

    async def start(self, arrivals: list[Arrival], now: int) -> None:
        """START every request (a resumed one answers its state), with its first steps."""
        progress = self.progress
        planned: list[tuple[InferRequest, dict[bytes, bytes], Action | None]] = []
        for _, stream, entry_id, data in arrivals:
            request = envelope.decode_request(data)
            entry = f"{stream.decode()}|{entry_id.decode()}"
            state = {b"req": data, b"entry": entry.encode()}
            action = progress.plan(request, state, now)
            if action is not None and action.submit:
                action.marked = True
                state.update(_encoded(children_of(action)))
            if action is None or action.answer is None:
                # Known before the write: a step's reply may come in before the write returns.
                self.known.put(request, state, now)
            planned.append((request, state, action))

        def before(pipe: Pipeline) -> None:
            for (header, stream, entry_id, data), (request, _, action) in zip(
                arrivals, planned, strict=True
            ):
                children = children_of(action) if action is not None else {}
                scripts.queue_start(
                    pipe,
                    progress.state_key(request.id),
                    data,
                    f"{stream.decode()}|{entry_id.decode()}",
                    header.deadline_ms - now + KEEP_AFTER_DEADLINE_MS,
                    children,
                )

        actions = [action for _, _, action in planned if action is not None]
        if self._cluster:  # a cluster pipeline runs each node's part apart: START goes first
            _, started, _ = await progress.write([], before=before)
            follow_ups, _, _ = await progress.write(actions)
        else:
            follow_ups, started, _ = await progress.write(actions, before=before)
        for (request, _, action), result in zip(planned, started, strict=True):
            if isinstance(result, Exception):
                raise result
            if not isinstance(result, list):  # fresh: the state is what was planned
                continue
            # Resumed: START wrote nothing (not the children either); plan again from the state.
            self.known.drop(request.id)
            whole = scripts.parse_state(result)
            if whole is None or (action is not None and action.answer is not None):
                continue
            self._plan_again(request, whole, now, follow_ups)
        await progress.apply(follow_ups)

    async def step_replies(self, entries: list[streams.Entry], now: int) -> None:
        """Plan every reply from what is known, write it all (one pipeline), then plan again the
        replies whose state was not what was known (a second pipeline, which acks their
        entries)."""
        progress, known = self.progress, self.known
        actions: list[Action] = []
        per_entry: list[tuple[bytes, list[scripts.StepRecord], list[Pending]]] = []
        for entry in entries:
            records: list[scripts.StepRecord] = []
            pending: list[Pending] = []
            for reply in self._replies(entry):
                found = self._step_of(reply)
                if found is None:
                    continue
                request_id, step = found
                produced = recorded(step, reply)
                state_key = progress.state_key(request_id)
                hit = known.get(request_id)
                if hit is None:  # never seen here: STEP answers the state, planned after
                    records.append(scripts.StepRecord(state_key, step.index, 0, produced, {}))
                    pending.append((reply, step, request_id))
                    continue
                request, cached = hit
                if reply.error_code:
                    actions.append(self._failed(request, cached, step, reply))
                    continue
                state = dict(cached)
                state[b"d:%d" % step.index] = b"1"
                state.update((b"t:" + name.encode(), data) for name, data in produced)
                action = progress.plan(request, state, now)
                if action is not None and action.answer is not None:
                    actions.append(action)
                    continue
                children: dict[str, str] = {}
                if action is not None:
                    action.marked = True
                    children = children_of(action)
                    state.update(_encoded(children))
                    actions.append(action)
                known.put(request, state, now)
                record = scripts.StepRecord(state_key, step.index, len(state), produced, children)
                records.append(record)
                pending.append((reply, step, request_id))
            per_entry.append((entry.entry_id, records, pending))

        def after(pipe: Pipeline) -> None:
            for entry_id, records, _ in per_entry:
                scripts.queue_step(pipe, self.steps_stream, entry_id, records)

        follow_ups, _, stepped = await progress.write(actions, after=after)
        unacked: list[bytes] = []
        for (entry_id, _, pending), outcomes in zip(per_entry, stepped, strict=True):
            if isinstance(outcomes, Exception):
                raise outcomes
            clean = True
            for (reply, step, request_id), outcome in zip(pending, outcomes, strict=True):  # type: ignore[call-overload]  # a list here
                if not isinstance(outcome, list):
                    if not outcome:  # finished or expired: a late or repeated reply
                        known.drop(request_id)
                    continue
                clean = False
                whole = scripts.parse_state(outcome)
                if whole is None:
                    continue
                request = envelope.decode_request(whole[b"req"])
                if reply.error_code:
                    follow_ups.append(self._failed(request, whole, step, reply))
                else:
                    self._plan_again(request, whole, now, follow_ups)
            if not clean:
                unacked.append(entry_id)

        def ack(pipe: Pipeline) -> None:
            pipe.xack(self.steps_stream, keys.SCHEDULER_GROUP, *unacked)
            pipe.xdel(self.steps_stream, *unacked)

        if follow_ups or unacked:
            await progress.apply(follow_ups, after=ack if unacked else None)

    def _plan_again(
        self, request: InferRequest, whole: dict[bytes, bytes], now: int, into: list[Action]
    ) -> None:
        """Plan from the state a script answered (with what this scheduler's writes in flight
        add to it); the children of what it submits are known at once."""
        state = self.known.merged(request, whole, now)
        action = self.progress.plan(request, state, now)
        if action is not None:
            if action.submit:
                state.update(_encoded(children_of(action)))
            into.append(action)

    def _replies(self, entry: streams.Entry) -> list[Reply]:
        payload = entry.fields.get(keys.FIELD_DATA)
        try:
            return envelope.decode_replies(payload) if payload else []
        except Exception:  # nothing in it can be answered: acked, never retried
            log.exception("undecodable step reply dropped", extra={"model": self.model})
            return []

    def _step_of(self, reply: Reply) -> tuple[str, Step] | None:
        parsed = parse_child(reply.id)
        steps = self.progress.steps
        if parsed is None or not 0 <= parsed[1] < len(steps):
            log.error("step reply of no known step dropped", extra={"request": reply.id})
            return None
        return parsed[0], steps[parsed[1]]

    def _failed(
        self, request: InferRequest, state: dict[bytes, bytes], step: Step, reply: Reply
    ) -> Action:
        message = f"in ensemble '{self.model}', {step.label} failed: {reply.error}"
        code = ErrorCode._value2member_map_.get(reply.error_code, ErrorCode.INTERNAL)
        return self.progress.failure(request, state, code, message)  # type: ignore[arg-type]  # an ErrorCode member


def _encoded(fields: dict[str, str]) -> dict[bytes, bytes]:
    return {name.encode(): value.encode() for name, value in fields.items()}


def parse_child(child_id: str) -> tuple[str, int] | None:
    """(parent request id, step index) of a step's request id."""
    parent, _, index = child_id.rpartition(".")
    return (parent, int(index)) if parent and index.isdigit() else None


def recorded(step: Step, reply: Reply) -> list[tuple[str, bytes]]:
    """A step's outputs under their ensemble names, encoded for STEP."""
    if reply.error_code:
        return []
    return [
        (name, envelope.encode(renamed(tensor, name)))
        for tensor in reply.outputs
        if (name := step.output_map.get(tensor.name)) is not None
    ]
