"""The protocol-neutral data plane: validate -> route -> admit -> enqueue -> await the reply.

REST (and later gRPC) controllers are thin adapters over :meth:`DataPlane.infer`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import redis.asyncio as aioredis

from gateway.enqueue import CoalescedScript
from gateway.http_codec import ParsedRequest
from gateway.model_table import ModelTable
from gateway.policy import queue_ticket
from gateway.replies import ReplyRouter
from gateway.routing import ANONYMOUS_CALLER, Caller, TrafficPolicy
from gateway.validation import ValidRequest, validate
from shared import envelope, keys, metrics, tracing
from shared.envelope import InferRequest, Reply, RequestHeader
from shared.errors import ConchError, ErrorCode, unavailable
from shared.ids import new_id
from shared.logs import request_id_var

# Atomic admission: refuse at once when no live worker serves the version or the queue is full,
# otherwise enqueue. One round trip; the queue length is exact because schedulers delete the
# entries they dispatch.
ENQUEUE_LUA = """
if redis.call('ZCOUNT', KEYS[1], ARGV[1], '+inf') == 0 then return -1 end
local max_queue = tonumber(ARGV[2])
if max_queue > 0 and redis.call('XLEN', KEYS[2]) >= max_queue then return -2 end
redis.call('XADD', KEYS[2], '*', 'h', ARGV[3], 'd', ARGV[4])
return 1
"""

# Time the gateway waits past the deadline for a worker's own deadline error before answering.
_GRACE_S = 0.05


@dataclass(frozen=True)
class InferOutcome:
    reply: Reply
    request: ValidRequest
    version: int


class DataPlane:
    def __init__(
        self,
        r: aioredis.Redis,
        table: ModelTable,
        replies: ReplyRouter,
        default_timeout_ms: int,
        policy: TrafficPolicy | None = None,
    ):
        self._redis = r
        self.policy = policy
        self.table = table
        self.replies = replies
        self._default_timeout_ms = default_timeout_ms
        self._enqueue = CoalescedScript(r, ENQUEUE_LUA)

    async def infer(
        self,
        model: str,
        version: str | None,
        parsed: ParsedRequest,
        caller: Caller = ANONYMOUS_CALLER,
        received: float | None = None,
    ) -> InferOutcome:
        """``received`` (perf_counter) is when the request arrived, so that the request
        duration a gateway reports includes reading and parsing the body."""
        config = self.table.config(model)
        if self.policy is None:
            tenant, number = None, self.table.resolve_version(model, version)
        else:  # auth (401/403), rate limit (429), then version choice by weights
            try:
                tenant = await self.policy.admit(model, caller)
            except ConchError as exc:
                metrics.record_rejected(
                    _tenant_label(self.policy, caller),
                    model,
                    _REASONS.get(exc.code, exc.code.lower()),
                )
                raise
            number = self.policy.route(model, version, caller)
        valid = validate(config, parsed)
        ticket = queue_ticket(config, parsed.parameters, tenant.priority if tenant else 0)
        if self.policy is not None:
            self.policy.shadow(self, model, version, number, parsed, tenant)
        request_id = new_id()
        request_id_var.set(parsed.id or request_id)
        started, code = received or time.perf_counter(), ErrorCode.CANCELLED.value
        arm = "shadow" if caller.trusted else "pinned" if version else "routed"
        span = tracing.start(
            "conch.gateway.infer", None, {"model": model, "version": number, "arm": arm}
        )
        now = int(time.time() * 1000)
        deadline = now + self._default_timeout_ms
        header = RequestHeader(
            id=request_id,
            reply_to=self.replies.stream,
            deadline_ms=deadline,
            priority=ticket.priority,
            batch_size=valid.batch_size,
            shape_sig=valid.shape_sig,
            enqueued_ms=now,
            queue_timeout_us=ticket.timeout_us,
            delay_on_timeout=ticket.delay_on_timeout,
        )
        payload = InferRequest(
            id=request_id,
            model=model,
            version=number,
            inputs=valid.inputs,
            outputs=[o.name for o in valid.outputs],
            parameters=parsed.parameters,
            reply_to=self.replies.stream,
            deadline_ms=deadline,
            enqueued_ms=now,
            client_id=parsed.id,
            trace=span.carrier,
        )
        future = self.replies.expect(request_id)
        try:
            admitted = await self._enqueue(
                keys=[
                    keys.ready(model, number),
                    keys.request_stream(model, number, ticket.priority),
                ],
                args=[
                    now,
                    ticket.max_queue_size,
                    envelope.encode(header),
                    envelope.encode(payload),
                ],
            )
            if admitted < 0:
                metrics.record_rejected(
                    tenant.name if tenant else None, model, _ADMISSION[admitted]
                )
            if admitted == -1:
                raise unavailable(
                    f"no live worker serves model '{model}' version {number}; start a worker "
                    f"for backend '{config.backend}'"
                )
            if admitted == -2:
                raise unavailable(
                    f"Exceeds maximum queue size ({ticket.max_queue_size}) for model '{model}' "
                    f"priority {ticket.priority}"
                )
            timeout_s = (deadline - now) / 1000 + _GRACE_S
            try:
                reply = await asyncio.wait_for(future, timeout_s)
            except TimeoutError:
                raise ConchError(
                    ErrorCode.DEADLINE_EXCEEDED,
                    f"Request timeout expired: model '{model}' version {number} did not answer "
                    f"within {self._default_timeout_ms} ms",
                ) from None
            code = reply.error_code or "OK"
        except ConchError as exc:
            code = exc.code.value
            raise
        except Exception:
            code = ErrorCode.INTERNAL.value
            raise
        finally:
            self.replies.forget(request_id)
            span.end(None if code == "OK" else code)
            metrics.record_request(model, number, arm, code, time.perf_counter() - started)
        if reply.error_code:
            raise ConchError(ErrorCode(reply.error_code), reply.error)
        return InferOutcome(reply, valid, number)


_ADMISSION = {-1: "no_worker", -2: "queue_full"}
_REASONS = {
    ErrorCode.RESOURCE_EXHAUSTED: "rate_limited",
    ErrorCode.UNAUTHENTICATED: "unauthenticated",
    ErrorCode.PERMISSION_DENIED: "forbidden",
}


def _tenant_label(policy: TrafficPolicy, caller: Caller) -> str | None:
    """The tenant a refused caller presented (metrics label): None when anonymous."""
    if caller.tenant is not None:
        return caller.tenant.name
    try:
        tenant = policy.tenants.identify(caller.authorization)
    except ConchError:
        return "unknown"
    return tenant.name if tenant is not None else None
