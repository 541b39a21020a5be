"""One execution of a holder's sequence steps: the model requests, the run, the replies, the
states to commit and the statistics.

Each step's request gets the client's inputs, the control tensors and each implicit state's
input (the state committed by the step before, or the initial state on START); it asks for the
client's outputs and every state output. A direct-strategy batch position without a ready step
is a padding request (READY false, zero inputs, initial state), as Triton sends it; its outputs
are dropped. A step whose deadline passed is answered with Triton's timeout error and does not
run; it is still committed (its state unchanged), so the sequence moves on.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np

from shared import metrics
from shared.metrics import response_stats
from shared.model_config import ModelConfig
from shared.model_config.sequences import SequenceSpec
from shared.wire import envelope, sequence_params, tensors
from shared.wire.envelope import InferRequest, Reply, Timing
from shared.wire.errors import ErrorCode
from shared.wire.sequence_params import FLAG_END
from workers.backend import Execution, ModelInstance, ModelRequest
from workers.sequence import state as state_codec
from workers.sequence.controls import control_tensors
from workers.sequence.store import Head, StepCommit

State = dict[str, np.ndarray]
# Runs ``instance.execute(requests)`` on the worker's pool, tracked per instance.
Execute = Callable[[ModelInstance, list[ModelRequest]], Awaitable[Execution]]


@dataclass
class Step:
    head: Head
    # The implicit state this step starts from (input name -> array).
    state: State


@dataclass
class Outcome:
    replies: list[tuple[str, Reply]] = field(default_factory=list)
    commits: list[StepCommit] = field(default_factory=list)
    # Per committed step: the state after it (the one before it when it failed).
    states: dict[str, State] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)


class StepRunner:
    def __init__(
        self,
        config: ModelConfig,
        version: int,
        spec: SequenceSpec,
        instance: ModelInstance,
        initial: State,
        worker_id: str,
    ):
        self.config, self.version, self.spec = config, version, spec
        self.instance = instance
        self.initial = initial
        self.worker_id = worker_id
        self._in_flight = metrics.child(metrics.EXECUTIONS_IN_FLIGHT, config.name, version)

    async def run(self, positions: list[Step | None], execute: Execute) -> Outcome:
        outcome = Outcome()
        now_ms = time.time() * 1000
        runnable: list[tuple[int, Step]] = []
        for index, step in enumerate(positions):
            if step is None:
                continue
            if now_ms >= step.head.request.deadline_ms:
                self._answer(outcome, step, _timeout(step.head.request), step.state)
            else:
                runnable.append((index, step))
        if not runnable:
            outcome.stats["fail_count"] = len(outcome.commits)
            return outcome
        template = runnable[0][1].head.request
        steps_at: dict[int, Step] = dict(runnable)
        # What goes to the model, in batch order: a step, or padding (None) for a direct slot.
        sent: list[Step | None] = []
        for index in range(len(positions)):
            step = steps_at.get(index)
            if step is not None or self.spec.strategy == "direct":
                sent.append(step)
        input_started = time.perf_counter_ns()  # compute_input: preparing the inputs
        requests = [self._request(s) if s else self._padding(template) for s in sent]
        input_ns = time.perf_counter_ns() - input_started
        self._in_flight.inc()
        try:
            execution = await execute(self.instance, requests)
        finally:
            self._in_flight.dec()
        input_ns += execution.compute_input_ns
        output_started = time.perf_counter_ns()  # compute_output: extracting outputs and states
        successes = 0
        queue_total = 0
        for step, result in zip(sent, execution.results, strict=True):
            if step is None:
                continue  # padding: nothing to answer
            request = step.head.request
            queue_ns = max(0, int((now_ms - request.enqueued_ms) * 1e6))
            queue_total += queue_ns
            timing = Timing(
                queue_ns=queue_ns,
                compute_input_ns=execution.compute_input_ns,
                compute_infer_ns=execution.compute_infer_ns,
                compute_output_ns=execution.compute_output_ns,
                batch_size=len(runnable),
            )
            if result.error is not None:
                reply = _error(request, result.error.code, result.error.message)
                self._answer(outcome, step, reply, step.state)
                continue
            try:
                new_state = {
                    s.input_name: state_codec.normalize(s, result.outputs[s.output_name])
                    for s in self.spec.states
                }
                outputs = [
                    tensors.from_numpy(name, result.outputs[name], _datatype(self.config, name))
                    for name in (request.outputs or self.config.output_names)
                ]
            except (KeyError, ValueError) as exc:
                reply = _error(
                    request,
                    ErrorCode.INTERNAL,
                    f"model '{self.config.name}' did not produce output {exc} of the sequence step",
                )
                self._answer(outcome, step, reply, step.state)
                continue
            successes += 1
            reply = Reply(
                id=request.id,
                model=self.config.name,
                version=self.version,
                outputs=outputs,
                timing=timing,
                worker=self.worker_id,
                parameters=result.parameters,
            )
            self._answer(outcome, step, reply, new_state)
        output_ns = time.perf_counter_ns() - output_started + execution.compute_output_ns
        infer_ns, size = execution.compute_infer_ns, len(runnable)
        for ran in range(size):  # Triton's response_stats: one response (index 0) per step
            response_stats.computed(outcome.stats, 0, infer_ns, output_ns, ran < successes)
        outcome.stats.update(
            {
                "execution_count": 1,
                "inference_count": size,
                "success_count": successes,
                "fail_count": len(outcome.commits) - successes,
                "queue_ns": queue_total,
                "compute_input_ns": input_ns * size,
                "compute_infer_ns": infer_ns * size,
                "compute_output_ns": output_ns * size,
                f"batch:{size}:count": 1,
                f"batch:{size}:compute_input_ns": input_ns,
                f"batch:{size}:compute_infer_ns": infer_ns,
                f"batch:{size}:compute_output_ns": output_ns,
            }
        )
        return outcome

    def _answer(self, outcome: Outcome, step: Step, reply: Reply, state: State) -> None:
        """Answer a step and commit it with ``state``: the state after it, or, when it failed,
        the one it started from (the initial state for a START), so Redis always holds what
        the next step starts from."""
        request = step.head.request
        outcome.replies.append((request.reply_to, reply))
        encoded: dict[str, tuple[str, bytes]] = {}
        for spec in self.spec.states:
            data, shape = state_codec.encode(spec, state[spec.input_name])
            encoded[spec.input_name] = (shape, data)
        flags = sequence_params.lenient(request.parameters).flags
        outcome.commits.append(StepCommit(step.head, bool(flags & FLAG_END), encoded))
        outcome.states[step.head.sequence] = state

    def _request(self, step: Step) -> ModelRequest:
        request = step.head.request
        sequence = sequence_params.lenient(request.parameters)
        inputs = {t.name: tensors.to_numpy(t) for t in request.inputs}
        inputs.update(control_tensors(self.spec, sequence.flags, sequence.id))
        inputs.update(step.state)
        wanted = list(request.outputs or self.config.output_names)
        wanted += [name for name in self.spec.state_outputs if name not in wanted]
        return ModelRequest(
            id=request.id,
            inputs=inputs,
            requested_outputs=wanted,
            parameters=request.parameters,
            correlation_id=sequence.id,
            flags=sequence.flags,
            deadline_ms=request.deadline_ms,
            priority=request.priority,
            tenant=request.tenant,
        )

    def _padding(self, template: InferRequest) -> ModelRequest:
        inputs = {t.name: _zeros_like(tensors.to_numpy(t)) for t in template.inputs}
        inputs.update(control_tensors(self.spec, 0, 0, ready=False))
        inputs.update(self.initial)
        wanted = list(template.outputs or self.config.output_names)
        wanted += [name for name in self.spec.state_outputs if name not in wanted]
        return ModelRequest(id="", inputs=inputs, requested_outputs=wanted)


def _zeros_like(array: np.ndarray) -> np.ndarray:
    if array.dtype == object:
        out = np.empty(array.shape, dtype=object)
        out.fill(b"")
        return out
    return np.zeros_like(array)


def _timeout(request: InferRequest) -> Reply:
    return _error(
        request,
        ErrorCode.UNAVAILABLE,
        "Request timeout expired: the deadline passed before execution",
    )


def _error(request: InferRequest, code: ErrorCode | str, message: str) -> Reply:
    return envelope.error_reply(
        request.id, request.model, request.version, ErrorCode(code).value, message
    )


def _datatype(config: ModelConfig, name: str) -> str | None:
    spec = config.output(name)
    return spec.datatype if spec is not None else None
