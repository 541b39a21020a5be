"""Submitting one inference request to a model's queue: the envelope and the admission script.

The gateway (a client's request), the scheduler's ensemble runner (each step) and the Python
backend's BLS client (``pb_utils.InferenceRequest.exec``) enqueue the same way: the request header
and payload built here, then the atomic admission script (``shared.fleet.admission_script``) on the
model's slot, coalesced per event-loop turn (``shared.fleet.coalesced_script``). The refusals it
answers become the same errors everywhere.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline

from shared import lua
from shared.fleet.admission_script import (
    NO_WORKER,
    QUEUE_FULL,
    AdmissionCall,
    admission_call,
)
from shared.fleet.coalesced_script import CoalescedScript
from shared.fleet.direct_path import direct_levels
from shared.model_config import ModelConfig
from shared.model_config.input_check import check_inputs
from shared.wire import envelope
from shared.wire.envelope import InferRequest, RequestHeader, Tensor
from shared.wire.errors import unavailable
from shared.wire.queue_ticket import QueueTicket, queue_ticket


def build(
    *,
    request_id: str,
    model: str,
    version: int,
    inputs: list[Tensor],
    outputs: list[str],
    parameters: dict[str, Any],
    reply_to: str,
    now_ms: int,
    deadline_ms: int,
    ticket: QueueTicket,
    batch_size: int,
    shape_sig: str,
    client_id: str = "",
    trace: dict[str, str] | None = None,
    priority: int = 0,
    tenant: str = "",
    silence_ms: int = 0,
    end_by_ms: int = 0,
) -> tuple[RequestHeader, InferRequest]:
    header = RequestHeader(
        id=request_id,
        reply_to=reply_to,
        deadline_ms=deadline_ms,
        priority=ticket.priority,
        batch_size=batch_size,
        shape_sig=shape_sig,
        enqueued_ms=now_ms,
        queue_timeout_us=ticket.timeout_us,
        delay_on_timeout=ticket.delay_on_timeout,
        enqueued_us=time.time_ns() // 1000,
    )
    payload = InferRequest(
        id=request_id,
        model=model,
        version=version,
        inputs=inputs,
        outputs=outputs,
        parameters=parameters,
        reply_to=reply_to,
        deadline_ms=deadline_ms,
        enqueued_ms=now_ms,
        client_id=client_id,
        trace=trace or {},
        priority=priority,
        tenant=tenant,
        silence_ms=silence_ms,
        end_by_ms=end_by_ms,
    )
    return header, payload


def refusal(admitted: int, model: str, version: int, ticket: QueueTicket, backend: str) -> None:
    """Raise the error for a refusal of the admission script (nothing when it admitted)."""
    if admitted >= 0:
        return
    if admitted == NO_WORKER and backend == "ensemble":
        raise unavailable(
            f"ensemble '{model}' version {version} is not ready: a model it composes has no "
            "ready version, or no scheduler runs it"
        )
    if admitted == NO_WORKER:
        raise unavailable(
            f"no live worker serves model '{model}' version {version}; start a worker "
            f"for backend '{backend}'"
        )
    if admitted == QUEUE_FULL:
        raise unavailable(
            f"Exceeds maximum queue size ({ticket.max_queue_size}) for model '{model}' "
            f"priority {ticket.priority}"
        )


@dataclass(frozen=True)
class Prepared:
    """One request ready for the admission script: its keys and arguments, and the ticket that
    says how a refusal reads."""

    call: AdmissionCall
    ticket: QueueTicket
    model: str
    version: int
    backend: str

    def refusal(self, admitted: int) -> None:
        refusal(admitted, self.model, self.version, self.ticket, self.backend)


def prepare(
    config: ModelConfig,
    version: int,
    *,
    request_id: str,
    inputs: list[Tensor],
    outputs: list[str],
    parameters: dict[str, Any],
    reply_to: str,
    now_ms: int,
    deadline_ms: int,
    priority: int,
    gone_ms: int,
    tenant: str = "",
    trace: dict[str, str] | None = None,
    direct: bool = True,
) -> Prepared:
    """A request the mesh makes itself (an ensemble step, a BLS call), with the caller's
    priority, tenant and deadline. Raises ConchError when the inputs do not fit the model.
    ``direct``: whether the direct path is on (``shared.fleet.direct_path``; the model decides the
    rest)."""
    ordered, batch_size, shape_sig = check_inputs(config, inputs)
    ticket = queue_ticket(config, {**parameters, "priority": priority})
    header, payload = build(
        request_id=request_id,
        model=config.name,
        version=version,
        inputs=ordered,
        outputs=outputs,
        parameters=parameters,
        reply_to=reply_to,
        now_ms=now_ms,
        deadline_ms=deadline_ms,
        ticket=ticket,
        batch_size=batch_size,
        shape_sig=shape_sig,
        trace=trace,
        priority=priority,
        tenant=tenant,
    )
    call = admission_call(
        model=config.name,
        version=version,
        priority=ticket.priority,
        request_id=request_id,
        now_ms=now_ms,
        deadline_ms=deadline_ms,
        gone_ms=gone_ms,
        max_queue_size=ticket.max_queue_size,
        header=envelope.encode(header),
        data=envelope.encode(payload),
        direct_levels=direct_levels(config, direct),
    )
    return Prepared(call, ticket, config.name, version, config.backend)


def queue_admission(pipe: Pipeline, prepared: Prepared) -> None:
    """The admission script on a pipeline of the caller's (EVAL: no script cache needed)."""
    keys_, args = prepared.call.keys, prepared.call.args
    pipe.eval(lua.ENQUEUE.source, len(keys_), *keys_, *args)


class Submitter:
    """Enqueue requests the mesh makes itself (BLS calls) with the caller's priority, tenant and
    deadline. Admission is idempotent by request id: submitting the same id again queues
    nothing."""

    def __init__(self, r: aioredis.Redis, gone_ms: int, direct: bool = True):
        self._enqueue = CoalescedScript(r, lua.ENQUEUE.source)
        self.gone_ms = gone_ms
        self.direct = direct

    async def submit(self, config: ModelConfig, version: int, **request: Any) -> None:
        """Raises ConchError when the inputs do not fit the model or admission refuses."""
        prepared = prepare(config, version, gone_ms=self.gone_ms, direct=self.direct, **request)
        admitted = await self._enqueue(keys=prepared.call.keys, args=prepared.call.args)
        prepared.refusal(admitted)
