"""Advancing ensemble requests from their state in Redis: submit the runnable steps, or finish.

Every decision starts from a state that is in Redis (or on its way there in the same pipeline):
what the scripts of ``scheduler.ensemble.scripts`` returned, or the copy of it this scheduler
keeps (``scheduler.ensemble.known``), which STEP checks against Redis. So any scheduler replica
may advance any request: the one that read it, the one that received a step's reply, or the one
that reclaimed it from a dead scheduler. Submitting
a step twice queues it once (the admission script keeps the child request id until the
deadline), and finishing twice answers once (the FINISH script deletes the state first).

Each step is a request of its own to the composing model's queue, with the caller's priority,
tenant, parameters and deadline: it is batched with that model's other requests, and a
priority-1 ensemble overtakes priority-2 work at every step. Its reply comes back on the
ensemble's step stream (``keys.ensemble_steps``); the child request id is ``<request>.<step>``
and is recorded in the state (``c:<step>``) so that cancelling the parent can reach it.

The work of many requests (the replies of one batch of steps) is planned first and written in
one pipeline (``write``): the caller's commands (START), every step's admission, the answers and
one FINISH for all of them, then the caller's commands again (STEP, the step replies' ack).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import msgspec
import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline

from scheduler.ensemble import scripts
from shared import metrics
from shared.fleet.publish import queue_replies
from shared.fleet.submission import Prepared, prepare, queue_admission
from shared.model_config import ModelConfig
from shared.model_config.ensemble_graph import Step, runnable
from shared.wire import envelope, keys
from shared.wire.envelope import InferRequest, Reply, Tensor, Timing
from shared.wire.errors import ConchError, ErrorCode

log = logging.getLogger(__name__)

_decode_tensor = msgspec.msgpack.Decoder(Tensor).decode

# (model, step's version: -1 for the latest ready) -> (config, version), or None if not ready.
Resolve = Callable[[str, int], tuple[ModelConfig, int] | None]
State = dict[bytes, bytes]


@dataclass
class Action:
    """What to write for one request: steps to submit, or its answer."""

    request: InferRequest
    state: State
    submit: list[tuple[Step, Prepared]] = field(default_factory=list)
    answer: Reply | None = None
    counters: dict[str, int] = field(default_factory=dict)
    # The children (``c:<step>``) are written by a script of the same pipeline (START, STEP).
    marked: bool = False


class EnsembleProgress:
    def __init__(
        self,
        r: aioredis.Redis,
        config: ModelConfig,
        version: int,
        steps: list[Step],
        gone_ms: int,
        resolve: Resolve,
        on_finished: Callable[[str], None] | None = None,
        direct: bool = True,
    ):
        self.redis = r
        self._on_finished = on_finished
        self.config = config
        self.model = config.name
        self.version = version
        self.steps = steps
        self._gone_ms = gone_ms
        self._direct = direct
        self._resolve = resolve
        self.steps_stream = keys.ensemble_steps(self.model, version)
        self.stats_key = keys.stats(self.model, version)

    def state_key(self, request_id: str) -> str:
        return keys.ensemble_state(self.model, self.version, request_id)

    # --- planning (no I/O) --------------------------------------------------------------------

    def plan(self, request: InferRequest, state: State, now: int) -> Action | None:
        """Submit the steps that can run and were not submitted yet, or answer the request."""
        done = _done(state)
        if now >= request.deadline_ms:
            return self.failure(
                request,
                state,
                ErrorCode.DEADLINE_EXCEEDED,
                f"Request timeout expired: ensemble '{self.model}' did not finish before its "
                f"deadline ({len(done)} of {len(self.steps)} steps answered)",
            )
        tensors = _tensors(request, state)
        if len(done) == len(self.steps):
            return self._success(request, state, tensors, now)
        launched = {int(k[2:]) for k in state if k.startswith(b"c:")}
        todo = [s for s in runnable(self.steps, tensors, done) if s.index not in launched]
        if not todo:
            return None
        action = Action(request, state)
        for step in todo:
            try:
                action.submit.append((step, self._prepare(request, step, tensors, now)))
            except ConchError as exc:
                return self.failure(
                    request, state, exc.code, f"in ensemble '{self.model}', {step.label}: {exc}"
                )
        return action

    def _prepare(
        self, request: InferRequest, step: Step, tensors: dict[str, Tensor], now: int
    ) -> Prepared:
        resolved = self._resolve(step.model, step.version)
        if resolved is None:
            wanted = "a ready version" if step.version < 0 else f"version {step.version}"
            raise ConchError(
                ErrorCode.UNAVAILABLE, f"composing model '{step.model}' has no {wanted}"
            )
        config, version = resolved
        return prepare(
            config,
            version,
            request_id=_child(request.id, step),
            inputs=[renamed(tensors[tensor], name) for name, tensor in step.input_map.items()],
            outputs=list(step.output_map),
            parameters=request.parameters,
            reply_to=self.steps_stream,
            now_ms=now,
            deadline_ms=request.deadline_ms,
            priority=request.priority,
            gone_ms=self._gone_ms,
            tenant=request.tenant,
            trace=request.trace,
            direct=self._direct,
        )

    def _success(
        self, request: InferRequest, state: State, tensors: dict[str, Tensor], now: int
    ) -> Action:
        wanted = request.outputs or self.config.output_names
        missing = [name for name in wanted if name not in tensors]
        if missing:
            message = f"in ensemble '{self.model}', no step produced output(s) {missing}"
            return self.failure(request, state, ErrorCode.INTERNAL, message)
        elapsed_ns = max(0, now - request.enqueued_ms) * 1_000_000
        batch = request.inputs[0].shape[0] if self.config.max_batch_size and request.inputs else 1
        reply = Reply(
            id=request.id,
            model=self.model,
            version=self.version,
            outputs=[tensors[name] for name in wanted],
            timing=Timing(compute_infer_ns=elapsed_ns, batch_size=batch),
        )
        counters = {
            "success_count": 1,
            "inference_count": batch,
            "execution_count": 1,
            "compute_infer_ns": elapsed_ns,
        }
        return Action(request, state, answer=reply, counters=counters)

    def failure(self, request: InferRequest, state: State, code: ErrorCode, message: str) -> Action:
        log.info(
            "ensemble request failed",
            extra={"model": self.model, "request": request.id, "error": message},
        )
        reply = envelope.error_reply(request.id, self.model, self.version, code.value, message)
        return Action(request, state, answer=reply, counters={"fail_count": 1})

    # --- writing ------------------------------------------------------------------------------

    async def apply(
        self, actions: list[Action], after: Callable[[Pipeline], None] | None = None
    ) -> None:
        """Write the actions in one pipeline (then ``after``'s commands), and answer with an
        error the requests whose step admission refused."""
        while actions or after is not None:
            actions, _, _ = await self.write(actions, after=after)
            after = None

    async def write(
        self,
        actions: list[Action],
        before: Callable[[Pipeline], None] | None = None,
        after: Callable[[Pipeline], None] | None = None,
    ) -> tuple[list[Action], list[object], list[object]]:
        """One pipeline: ``before``'s commands, every action (the steps' admissions, then the
        answers and one FINISH for all of them), then ``after``'s commands. Returns the
        follow-ups (error answers for refused admissions) and the results of ``before``'s and
        ``after``'s commands."""
        now = int(time.time() * 1000)
        spans: list[tuple[Action, int]] = []
        async with self.redis.pipeline(transaction=False) as pipe:
            if before is not None:
                before(pipe)
            head = len(pipe)
            for action in actions:
                spans.append((action, len(pipe)))
                self._queue_submit(pipe, action)
            answered = [action for action in actions if action.answer is not None]
            finish_at = self._queue_answers(pipe, answered, now) if answered else -1
            tail = len(pipe)
            if after is not None:
                after(pipe)
            results = await pipe.execute()
        finished = iter(results[finish_at] if answered else ())
        follow_ups = []
        for action, start in spans:
            if action.answer is not None:
                self._settle_answer(action, int(next(finished)))
                continue
            admitted = results[start : start + len(action.submit)]
            if (follow := self._settle(action, admitted)) is not None:
                follow_ups.append(follow)
        return follow_ups, results[:head], results[tail:]

    def _queue_submit(self, pipe: Pipeline, action: Action) -> None:
        for _, prepared in action.submit:
            queue_admission(pipe, prepared)
        if action.submit and not action.marked:  # the children: the cancel tree's hook
            # Mapping's key type is invariant: dict[str, str] is a valid Mapping[FieldT, ...].
            pipe.hset(
                self.state_key(action.request.id),
                mapping=cast(Mapping[Any, str], children_of(action)),
            )

    def _queue_answers(self, pipe: Pipeline, answered: list[Action], now: int) -> int:
        """Publish every answer, then one FINISH for all (deletes the states, acks the entries,
        adds the statistics). Returns FINISH's index in the pipeline."""
        queue_replies(pipe, [(a.request.reply_to, a.answer) for a in answered])  # type: ignore[misc]  # answer set once answered
        finished = []
        for action in answered:
            stream, _, entry_id = action.state.get(b"entry", b"|").decode().rpartition("|")
            state_key = self.state_key(action.request.id)
            finished.append((state_key, stream, entry_id, action.counters))
        at = len(pipe)
        scripts.queue_finish(pipe, self.stats_key, finished, now)
        return at

    def _settle(self, action: Action, results: list[object]) -> Action | None:
        """The request's follow-up: an error answer when a step's admission refused."""
        for (step, prepared), admitted in zip(action.submit, results, strict=False):
            if isinstance(admitted, Exception):
                raise admitted
            try:
                prepared.refusal(int(admitted))  # type: ignore[call-overload]  # an EVAL reply: int
            except ConchError as exc:
                message = f"in ensemble '{self.model}', {step.label}: {exc}"
                return self.failure(action.request, action.state, exc.code, message)
        return None

    def _settle_answer(self, action: Action, finished_here: int) -> None:
        if self._on_finished is not None:
            self._on_finished(action.request.id)
        if finished_here and action.answer is not None:
            if action.answer.error_code:
                metrics.record_failures(self.model, self.version, metrics.OTHER)
            else:
                metrics.record_batch(self.model, self.version, action.counters)


def children_of(action: Action) -> dict[str, str]:
    """The state's fields for the steps an action submits (``c:<step>``: their request ids)."""
    return {f"c:{step.index}": _child(action.request.id, step) for step, _ in action.submit}


def renamed(tensor: Tensor, name: str) -> Tensor:
    return Tensor(name, tensor.datatype, tensor.shape, tensor.data)


def _child(request_id: str, step: Step) -> str:
    return f"{request_id}.{step.index}"


def _done(state: State) -> set[int]:
    return {int(k[2:]) for k in state if k.startswith(b"d:")}


def _tensors(request: InferRequest, state: State) -> dict[str, Tensor]:
    tensors = {t.name: t for t in request.inputs}
    for key, value in state.items():
        if key.startswith(b"t:"):
            tensors[key[2:].decode()] = _decode_tensor(value)
    return tensors
