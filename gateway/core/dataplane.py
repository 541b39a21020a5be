"""Longer than 300 lines because one request's life (admission, routing, the response cache,
the enqueue bounded by its deadline, the answer, shadow copies) reads best in one place.

The protocol-neutral data plane: admit -> route -> validate -> enqueue -> await the reply.

The Litestar route, the ASGI fast path, the HTTP protocol hook and the gRPC servicer are thin
adapters over :meth:`DataPlane.infer`. The copy of a request that shadow traffic asks for
(``VersionRouter.shadow``, a pure decision) is sent from here too, as a request the gateway makes
itself, and its outcome recorded for the admin API.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from gateway.core.admission import Admission
from gateway.core.admission_plan import AdmissionPlans
from gateway.core.admission_retry import admit_within
from gateway.core.auth import Tenant
from gateway.core.caller import ANONYMOUS_CALLER, Caller
from gateway.core.cancellation import cancel_request
from gateway.core.coarse_timers import Deadline
from gateway.core.cold_start import ColdStarts
from gateway.core.in_flight import InFlightLimit
from gateway.core.model_table import ModelTable
from gateway.core.request import ParsedRequest
from gateway.core.request_tally import record_request
from gateway.core.sequence_admission import SequenceAdmission, check_request, sequence_request
from gateway.core.validation import ValidRequest, validate
from gateway.extensions.around_infer import InferExtensions
from gateway.extensions.response_cache import ResponseCache
from gateway.extensions.trace_settings import TraceSettings, start_span
from gateway.routing.version_router import VersionRouter
from shared import lua, metrics
from shared.fleet import submission
from shared.fleet.admission_script import NO_WORKER, QUEUE_FULL
from shared.fleet.coalesced_script import CoalescedScript
from shared.fleet.replies import ReplyRouter
from shared.runtime.ids import new_id
from shared.runtime.logs import request_id_var
from shared.runtime.redis_retry import CONNECTION_ERRORS
from shared.wire import deadlines, envelope, keys
from shared.wire.envelope import Reply
from shared.wire.errors import ConchError, ErrorCode
from shared.wire.queue_ticket import QueueTicket

log = logging.getLogger(__name__)

# Time the gateway waits past the deadline for a worker's own deadline error before answering.
_GRACE_S = 0.05
# Shadow requests in flight per gateway process beyond which more are skipped (and counted).
MAX_SHADOW_IN_FLIGHT = 256


# Not frozen: a frozen dataclass's __init__ sets each field through object.__setattr__, and one
# of these (and one _Begun, 16 fields) is built per request.
@dataclass(slots=True)
class InferOutcome:
    reply: Reply
    request: ValidRequest
    version: int


@dataclass(slots=True)
class _Begun:
    """A request admitted, routed and validated, ready to enqueue."""

    model: str
    number: int
    valid: ValidRequest
    request_id: str
    deadline_ms: int
    timeout_s: float
    # Deadlines only where someone asked (shared.wire.deadlines): what bounds this request.
    deadline: deadlines.Deadline
    arm: str
    started: float
    span: Any
    cached: Any
    admit: Callable[[], Awaitable[int]]
    ticket: QueueTicket
    tenant: Tenant | None
    backend: str


class DataPlane:
    # Shared memory and classification around each inference (set by the gateway's state).
    extensions: InferExtensions
    # Triton's response cache, shared by the fleet (None: no cache configured).
    cache: ResponseCache | None = None
    # Triton's trace settings: which requests to trace, at what level (None: trace every one).
    traces: TraceSettings | None = None
    # on_demand model control: a miss waits for the model's load (None: other modes).
    cold_starts: ColdStarts | None = None

    def __init__(
        self,
        r: aioredis.Redis,
        table: ModelTable,
        replies: ReplyRouter,
        default_timeout_ms: int,
        admission: Admission,
        versions: VersionRouter,
        gone_ms: int = 30_000,
        max_in_flight: int = 0,
        direct: bool = True,
        stream_silence_ms: int = 60_000,
    ):
        self._redis = r
        self._gone_ms = gone_ms
        self._direct = direct
        # Taken by the protocol adapters before a request's body is read (``gateway.rest.infer``,
        # ``gateway.grpc.service``); shadow requests have their own cap.
        self.in_flight = InFlightLimit(max_in_flight)
        self.admission = admission
        self.versions = versions
        self.table = table
        self.replies = replies
        self._default_timeout_ms = default_timeout_ms
        self._silence_ms = stream_silence_ms
        self._enqueue = CoalescedScript(r, lua.ENQUEUE.source)
        self._plans = AdmissionPlans(direct)
        self._sequences = SequenceAdmission(r, gone_ms)
        self._shadow_tasks: set[asyncio.Task[None]] = set()

    async def stop(self) -> None:
        """Cancel the shadow requests still in flight (their clients are the gateway itself)."""
        for task in list(self._shadow_tasks):
            task.cancel()
        await asyncio.gather(*self._shadow_tasks, return_exceptions=True)

    def authenticate(self, model: str, caller: Caller) -> Caller:
        """401 / 403 from the headers alone, counted as admission refusals are."""
        try:
            return self.admission.authenticate(model, caller)
        except ConchError as exc:
            metrics.record_rejected(
                self.admission.tenant_label(caller),
                model,
                _REASONS.get(exc.code, exc.code.lower()),
            )
            raise

    async def infer(
        self,
        model: str,
        version: str | None,
        parsed: ParsedRequest,
        caller: Caller = ANONYMOUS_CALLER,
        received: float | None = None,
        endpoint: str = "HTTP end point",
    ) -> InferOutcome:
        """``received`` (perf_counter) is when the request arrived, so that the request
        duration a gateway reports includes reading and parsing the body. ``endpoint`` names
        the protocol in Triton's refusal of a decoupled model."""
        begun = await self._begin(model, version, parsed, caller, received, endpoint)
        if isinstance(begun, InferOutcome):
            return begun
        number, code = begun.number, ErrorCode.CANCELLED.value
        future = self.replies.expect(begun.request_id)
        try:
            # The deadline bounds the whole exchange with Redis: the enqueue as well as the wait.
            # (``asyncio.timeout``'s semantics without a loop timer per request: coarse_timers.)
            try:
                with Deadline(begun.timeout_s):
                    await self._admit(begun)
                    reply = await future
            except TimeoutError:
                raise self._deadline_error(model, number, begun.deadline, False) from None
            code = reply.error_code or "OK"
        except ConchError as exc:
            code = exc.code.value
            raise
        except asyncio.CancelledError:  # the client went away: the request is abandoned
            self._cancel(begun)
            raise
        except Exception:
            code = ErrorCode.INTERNAL.value
            raise
        finally:
            self.replies.forget(begun.request_id)
            begun.span.end(None if code == "OK" else code)
            record_request(model, number, begun.arm, code, time.perf_counter() - begun.started)
        if reply.error_code:
            raise ConchError(ErrorCode(reply.error_code), reply.error)
        if begun.cached and self.cache:
            self.cache.store(begun.cached, reply.outputs)
        return InferOutcome(reply, begun.valid, number)

    async def infer_stream(
        self,
        model: str,
        version: str | None,
        parsed: ParsedRequest,
        caller: Caller = ANONYMOUS_CALLER,
        received: float | None = None,
    ) -> AsyncIterator[InferOutcome]:
        """Admission, routing and validation as :meth:`infer`, then one outcome per frame (the
        last one's ``reply.final`` is true); decoupled models are welcome here. Refusals raise
        before the first frame, a mid-stream error after the frames already yielded. Closing
        the iterator before the final frame (the client left) cancels the request."""
        begun = await self._begin(model, version, parsed, caller, received, None)
        if isinstance(begun, InferOutcome):
            yield begun
            return
        number, code, ended = begun.number, ErrorCode.CANCELLED.value, False
        stream = self.replies.expect_stream(begun.request_id)
        # Bounded by silence (no frame for the silence bound), never past an asked end.
        loop, bound = asyncio.get_running_loop(), begun.deadline
        end_by = None
        if bound.end_by_ms:
            end_by = loop.time() + (bound.end_by_ms - time.time() * 1000) / 1000 + _GRACE_S
        until = loop.time() + begun.timeout_s
        heard = False
        try:
            try:
                async with asyncio.timeout_at(until):
                    await self._admit(begun)
            except TimeoutError:
                raise self._deadline_error(model, number, bound, heard) from None
            while True:
                try:
                    async with asyncio.timeout_at(until):
                        reply = await stream.next()
                except TimeoutError:
                    raise self._deadline_error(model, number, bound, heard) from None
                if bound.silence_ms:
                    heard, until = True, loop.time() + bound.silence_ms / 1000 + _GRACE_S
                    if end_by is not None:
                        until = min(until, end_by)
                if reply.error_code:
                    ended = True
                    raise ConchError(ErrorCode(reply.error_code), reply.error)
                if reply.final:
                    ended, code = True, "OK"
                yield InferOutcome(reply, begun.valid, number)
                if ended:
                    return
        except ConchError as exc:
            code = exc.code.value
            raise
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except Exception:
            code = ErrorCode.INTERNAL.value
            raise
        finally:
            self.replies.forget_stream(begun.request_id)
            if not ended:  # the consumer left, the deadline passed: stop the work
                self._cancel(begun)
            begun.span.end(None if code == "OK" else code)
            record_request(model, number, begun.arm, code, time.perf_counter() - begun.started)

    async def _begin(
        self,
        model: str,
        version: str | None,
        parsed: ParsedRequest,
        caller: Caller,
        received: float | None,
        endpoint: str | None,
    ) -> _Begun | InferOutcome:
        """Everything before the enqueue: admit, route, validate, the cache; an outcome for a
        cache hit. ``endpoint`` None: the caller streams, decoupled models are served."""
        arrived_ms = 0  # on_demand: a request that waited for its model's load
        if self.cold_starts is not None:
            asked = deadlines.asked_ms(parsed.parameters, 0)
            arrived_ms = int(time.time() * 1000)
            if not await self.cold_starts.ensure_loaded(model, asked / 1000 if asked else None):
                arrived_ms = 0
        config = self.table.configs.get(model) or await self.table.config_after_miss(model)
        try:  # auth (401/403), rate limit (429), then version choice by weights
            tenant = await self.admission.admit(model, caller)
        except ConchError as exc:
            metrics.record_rejected(
                self.admission.tenant_label(caller),
                model,
                _REASONS.get(exc.code, exc.code.lower()),
            )
            raise
        if endpoint is not None and config.decoupled:  # Triton's refusal, word for word
            raise ConchError(
                ErrorCode.UNSUPPORTED,
                f"{endpoint} doesn't support models with decoupled transaction policy",
            )
        sequence, spec = sequence_request(config, parsed.parameters)
        number = self.versions.route(model, version, caller.route_key or sequence.route_key)
        valid = validate(config, parsed)
        plan = self._plans.of(config, number)
        ticket = plan.ticket(parsed.parameters, tenant.priority if tenant else 0)
        if spec is not None:  # no shadow copy: it would start a sequence of its own elsewhere
            check_request(config, spec, sequence, valid, parsed.id)
        elif (shadow := self.versions.shadow(model, version, number)) is not None:
            self._send_shadow(model, shadow, number, parsed, tenant)
        request_id = new_id()
        request_id_var.set(parsed.id or request_id)
        started = received or time.perf_counter()
        arm = "shadow" if caller.trusted else "pinned" if version else "routed"
        cached = (
            self.cache
            and not config.decoupled
            and await self.cache.find(config, self.table.configs, number, valid, parsed)
        )
        if cached and cached.outputs is not None:  # a hit: answered without queueing
            record_request(model, number, arm, "OK", time.perf_counter() - started)
            return InferOutcome(Reply("", model, number, cached.outputs), valid, number)
        span = await start_span(self.traces, model, number, arm, valid.inputs)
        # A cold start's wait is queue time, inside the request's deadline: both start at arrival.
        now = arrived_ms or int(time.time() * 1000)
        asked = deadlines.asked_ms(parsed.parameters, tenant.timeout_ms if tenant else 0)
        bound = deadlines.plan(
            now, asked, endpoint is None, self._default_timeout_ms, self._silence_ms
        )
        deadline = bound.deadline_ms
        header, payload = submission.build(
            request_id=request_id,
            model=model,
            version=number,
            inputs=valid.inputs,
            outputs=[o.name for o in valid.outputs],
            parameters=parsed.parameters,
            reply_to=self.replies.stream,
            now_ms=now,
            deadline_ms=deadline,
            ticket=ticket,
            batch_size=valid.batch_size,
            shape_sig=valid.shape_sig,
            client_id=parsed.id,
            trace=span.carrier,
            priority=parsed.parameters.get("priority") or (tenant.priority if tenant else 0),
            tenant=tenant.name if tenant else "",
            silence_ms=bound.silence_ms,
            end_by_ms=bound.end_by_ms,
        )
        if spec is not None:  # a sequence: its own queue, in arrival order (no scheduler)

            def admit() -> Awaitable[int]:
                return self._sequences.admit(config, spec, sequence, payload)
        else:
            call = plan.call(
                priority=ticket.priority,
                request_id=request_id,
                now_ms=now,
                deadline_ms=deadline,
                gone_ms=self._gone_ms,
                max_queue_size=ticket.max_queue_size,
                header=envelope.encode(header),
                data=envelope.encode(payload),
            )

            def admit() -> Awaitable[int]:
                return self._enqueue(keys=call.keys, args=call.args)

        return _Begun(
            model=model,
            number=number,
            valid=valid,
            request_id=request_id,
            deadline_ms=deadline,
            timeout_s=(deadline - now) / 1000 + _GRACE_S,
            deadline=bound,
            arm=arm,
            started=started,
            span=span,
            cached=cached or None,
            admit=admit,
            ticket=ticket,
            tenant=tenant,
            backend=config.backend,
        )

    async def _admit(self, begun: _Begun) -> None:
        try:  # the first try without the retry loop's two coroutine layers
            admitted = await begun.admit()
        except CONNECTION_ERRORS:
            admitted = await admit_within(begun.admit, begun.deadline_ms, begun.model)
        if admitted == NO_WORKER and self.cold_starts is not None:
            admitted = await self._admit_after_unload(begun)
        if admitted < 0:
            tenant = begun.tenant.name if begun.tenant else None
            metrics.record_rejected(tenant, begun.model, _ADMISSION[admitted])
            submission.refusal(admitted, begun.model, begun.number, begun.ticket, begun.backend)

    async def _admit_after_unload(self, begun: _Begun) -> int:
        """on_demand: the model was unloaded (evicted, dropped idle) between the table's view
        and the admission. A miss like any other: the request waits for the model's load,
        inside its deadline, and is admitted then. Workers unload without routing around first
        in this mode, since this is where a request that raced the unload goes."""
        assert self.cold_starts is not None
        await self.table.refresh()  # the view that said ready is stale
        left_s = (begun.deadline_ms - int(time.time() * 1000)) / 1000
        if left_s <= 0:
            return NO_WORKER
        await self.cold_starts.ensure_loaded(begun.model, left_s)  # a hit: another copy is live
        return await begun.admit()

    def _deadline_error(
        self, model: str, number: int, bound: deadlines.Deadline, heard: bool
    ) -> ConchError:
        """Names the bound that ended the request: the asked timeout, the unary bound, or the
        stream's silence."""
        what = f"Request timeout expired: model '{model}' version {number}"
        if bound.silence_ms and not (bound.end_by_ms and bound.end_by_ms <= time.time() * 1000):
            since = "its last response" if heard else "the request was admitted"
            return ConchError(
                ErrorCode.DEADLINE_EXCEEDED,
                f"{what} sent no response for {bound.silence_ms} ms since {since} (the stream "
                "silence bound, CONCH_GATEWAY_STREAM_SILENCE_TIMEOUT_MS)",
            )
        if bound.asked_ms:
            return ConchError(
                ErrorCode.DEADLINE_EXCEEDED,
                f"{what} did not finish within the {bound.asked_ms} ms asked for (the request's "
                "timeout parameter or its tenant's timeout_ms)",
            )
        return ConchError(
            ErrorCode.DEADLINE_EXCEEDED,
            f"{what} did not answer within {self._default_timeout_ms} ms (the unary bound, "
            "CONCH_GATEWAY_DEFAULT_TIMEOUT_MS)",
        )

    def _cancel(self, begun: _Begun) -> None:
        """Mark the request cancelled in Redis, in the background (the caller is going away)."""
        task = asyncio.create_task(
            cancel_request(self._redis, begun.model, begun.request_id, begun.deadline_ms)
        )
        self._shadow_tasks.add(task)
        task.add_done_callback(self._shadow_tasks.discard)

    def _send_shadow(
        self, model: str, version: int, primary: int, parsed: ParsedRequest, tenant: Tenant | None
    ) -> None:
        """A copy of a weight-routed request to the model's shadow version, in the background."""
        if len(self._shadow_tasks) >= MAX_SHADOW_IN_FLIGHT:
            self._record(model, version, "skipped", None)
            return
        caller = Caller(trusted=True, tenant=tenant)
        task = asyncio.create_task(self._shadow_request(model, version, primary, parsed, caller))
        self._shadow_tasks.add(task)
        task.add_done_callback(self._shadow_tasks.discard)

    async def _shadow_request(
        self, model: str, version: int, primary: int, parsed: ParsedRequest, caller: Caller
    ) -> None:
        started = time.perf_counter()
        error = ""
        try:
            await self.infer(model, str(version), parsed, caller=caller)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        latency_us = int((time.perf_counter() - started) * 1e6)
        outcome = "failed" if error else "succeeded"
        log.info(
            "shadow request answered",
            extra={
                "model": model,
                "shadow_version": version,
                "primary_version": primary,
                "outcome": outcome,
                "latency_ms": round(latency_us / 1000, 3),
                "error": error,
            },
        )
        await self._record_async(model, version, outcome, latency_us)

    def _record(self, model: str, version: int, outcome: str, latency_us: int | None) -> None:
        task = asyncio.create_task(self._record_async(model, version, outcome, latency_us))
        self._shadow_tasks.add(task)
        task.add_done_callback(self._shadow_tasks.discard)

    async def _record_async(
        self, model: str, version: int, outcome: str, latency_us: int | None
    ) -> None:
        """The shadow counters the admin API shows (``GET /v2/admin/models/{m}/shadow``)."""
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                key = keys.shadow_stats(model, version)
                pipe.hincrby(key, outcome, 1)
                if latency_us is not None:
                    pipe.hincrby(key, "sent", 1)
                    pipe.hincrby(key, "latency_us", latency_us)
                await pipe.execute()
        except Exception:
            log.exception("could not record a shadow outcome", extra={"model": model})


_ADMISSION = {NO_WORKER: "no_worker", QUEUE_FULL: "queue_full"}
_REASONS = {
    ErrorCode.RESOURCE_EXHAUSTED: "rate_limited",
    ErrorCode.UNAUTHENTICATED: "unauthenticated",
    ErrorCode.PERMISSION_DENIED: "forbidden",
}
