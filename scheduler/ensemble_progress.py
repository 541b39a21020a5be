"""Advancing one ensemble request from its state in Redis: submit the runnable steps, or finish.

Every call starts from the state the scripts of ``scheduler.ensemble_scripts`` returned, never
from memory, so any scheduler replica may advance any request: the one that read it, the one
that received a step's reply, or the one that reclaimed it from a dead scheduler. Submitting a
step twice queues it once (the admission script keeps the child request id until the deadline),
and finishing twice answers once (the FINISH script deletes the state first).

Each step is a request of its own to the composing model's queue, with the caller's priority,
tenant, parameters and deadline: it is batched with that model's other requests, and a
priority-1 ensemble overtakes priority-2 work at every step. Its reply comes back on the
ensemble's step stream (``keys.ensemble_steps``); the child request id is ``<request>.<step>``
and is recorded in the state (``c:<step>``) so that cancelling the parent can reach it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import msgspec
import redis.asyncio as aioredis

from scheduler import ensemble_scripts as scripts
from shared import envelope, keys, metrics
from shared.ensemble_graph import Step, runnable
from shared.envelope import InferRequest, Reply, Tensor, Timing
from shared.errors import ConchError, ErrorCode
from shared.model_config import ModelConfig
from shared.publish import queue_replies
from shared.submission import Submitter

log = logging.getLogger(__name__)

_decode_tensor = msgspec.msgpack.Decoder(Tensor).decode

# (model, step's version: -1 for the latest ready) -> (config, version), or None if not ready.
Resolve = Callable[[str, int], tuple[ModelConfig, int] | None]


class EnsembleProgress:
    def __init__(
        self,
        r: aioredis.Redis,
        config: ModelConfig,
        version: int,
        steps: list[Step],
        submitter: Submitter,
        resolve: Resolve,
        on_finished: Callable[[str], None] | None = None,
    ):
        self._redis = r
        self._on_finished = on_finished
        self.config = config
        self.model = config.name
        self.version = version
        self.steps = steps
        self._submitter = submitter
        self._resolve = resolve
        self.steps_stream = keys.ensemble_steps(self.model, version)
        self.stats_key = keys.stats(self.model, version)

    def state_key(self, request_id: str) -> str:
        return keys.ensemble_state(self.model, self.version, request_id)

    async def advance(self, request: InferRequest, state: dict[bytes, bytes]) -> None:
        """Submit the steps that can run and were not submitted yet, or finish the request."""
        now = int(time.time() * 1000)
        if now >= request.deadline_ms:
            await self.fail(
                request,
                state,
                ErrorCode.DEADLINE_EXCEEDED,
                f"Request timeout expired: ensemble '{self.model}' did not finish before its "
                f"deadline ({len(_done(state))} of {len(self.steps)} steps answered)",
            )
            return
        done = _done(state)
        if len(done) == len(self.steps):
            await self.succeed(request, state, now)
            return
        tensors = _tensors(request, state)
        launched = {int(k[2:]) for k in state if k.startswith(b"c:")}
        todo = [s for s in runnable(self.steps, tensors, done) if s.index not in launched]
        if not todo:
            return
        results = await asyncio.gather(
            *(self._submit(request, step, tensors, now) for step in todo), return_exceptions=True
        )
        for step, result in zip(todo, results, strict=True):
            if isinstance(result, BaseException):
                code = result.code if isinstance(result, ConchError) else ErrorCode.INTERNAL
                text = result.message if isinstance(result, ConchError) else repr(result)
                await self.fail(
                    request, state, code, f"in ensemble '{self.model}', {step.label}: {text}"
                )
                return
        children = {f"c:{step.index}": _child(request.id, step) for step in todo}
        await self._redis.hset(self.state_key(request.id), mapping=children)

    async def _submit(
        self, request: InferRequest, step: Step, tensors: dict[str, Tensor], now: int
    ) -> None:
        resolved = self._resolve(step.model, step.version)
        if resolved is None:
            wanted = "a ready version" if step.version < 0 else f"version {step.version}"
            raise ConchError(
                ErrorCode.UNAVAILABLE, f"composing model '{step.model}' has no {wanted}"
            )
        config, version = resolved
        inputs = [_renamed(tensors[tensor], name) for name, tensor in step.input_map.items()]
        await self._submitter.submit(
            config,
            version,
            request_id=_child(request.id, step),
            inputs=inputs,
            outputs=list(step.output_map),
            parameters=request.parameters,
            reply_to=self.steps_stream,
            now_ms=now,
            deadline_ms=request.deadline_ms,
            priority=request.priority,
            tenant=request.tenant,
            trace=request.trace,
        )

    async def record(self, step: Step, reply: Reply, request_id: str) -> dict[bytes, bytes] | None:
        """Record a step's outputs under their ensemble names; the state after it (None: the
        request is finished or expired)."""
        produced = []
        if not reply.error_code:
            for tensor in reply.outputs:
                name = step.output_map.get(tensor.name)
                if name is not None:
                    produced.append((name, envelope.encode(_renamed(tensor, name))))
        async with self._redis.pipeline(transaction=False) as pipe:
            scripts.queue_record(pipe, self.state_key(request_id), step.index, produced)
            (flat,) = await pipe.execute()
        return scripts.parse_state(flat)

    async def succeed(self, request: InferRequest, state: dict[bytes, bytes], now: int) -> None:
        tensors = _tensors(request, state)
        wanted = request.outputs or self.config.output_names
        missing = [name for name in wanted if name not in tensors]
        if missing:
            await self.fail(
                request,
                state,
                ErrorCode.INTERNAL,
                f"in ensemble '{self.model}', no step produced output(s) {missing}",
            )
            return
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
        await self._finish(request, state, reply, counters, now)

    async def fail(
        self, request: InferRequest, state: dict[bytes, bytes], code: ErrorCode, message: str
    ) -> None:
        reply = envelope.error_reply(request.id, self.model, self.version, code.value, message)
        log.info(
            "ensemble request failed",
            extra={"model": self.model, "request": request.id, "error": message},
        )
        await self._finish(request, state, reply, {"fail_count": 1}, int(time.time() * 1000))

    async def _finish(
        self,
        request: InferRequest,
        state: dict[bytes, bytes],
        reply: Reply,
        counters: dict[str, int],
        now: int,
    ) -> None:
        """Publish the answer, then delete the state and the request's entry (one script)."""
        stream, _, entry_id = state.get(b"entry", b"|").decode().rpartition("|")
        async with self._redis.pipeline(transaction=False) as pipe:
            queue_replies(pipe, [(request.reply_to, reply)])
            scripts.queue_finish(
                pipe, self.state_key(request.id), stream, entry_id, self.stats_key, counters, now
            )
            results = await pipe.execute()
        if self._on_finished is not None:
            self._on_finished(request.id)
        if int(results[-1]):
            if reply.error_code:
                metrics.record_failures(self.model, self.version, metrics.OTHER)
            else:
                metrics.record_batch(self.model, self.version, counters)


def _renamed(tensor: Tensor, name: str) -> Tensor:
    return Tensor(name, tensor.datatype, tensor.shape, tensor.data)


def _child(request_id: str, step: Step) -> str:
    return f"{request_id}.{step.index}"


def parse_child(child_id: str) -> tuple[str, int] | None:
    """(parent request id, step index) of a step's request id."""
    parent, _, index = child_id.rpartition(".")
    return (parent, int(index)) if parent and index.isdigit() else None


def _done(state: dict[bytes, bytes]) -> set[int]:
    return {int(k[2:]) for k in state if k.startswith(b"d:")}


def _tensors(request: InferRequest, state: dict[bytes, bytes]) -> dict[str, Tensor]:
    tensors = {t.name: t for t in request.inputs}
    for key, value in state.items():
        if key.startswith(b"t:"):
            tensors[key[2:].decode()] = _decode_tensor(value)
    return tensors
