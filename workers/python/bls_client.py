"""BLS in a Python model process: ``pb_utils.InferenceRequest(...).exec()`` / ``async_exec()``.

A call is a request of the mesh like any other: it is submitted to the called model's queue with
the shared admission script (``shared.fleet.submission``), so it is batched with that model's other
requests and scheduled by priority, and its reply comes back on this process's own reply stream
(``shared.fleet.replies``, the gateway's reply reader). It carries the calling requests' priority,
tenant and remaining deadline (those of the batch ``execute`` is running: the earliest deadline,
the most urgent priority); an explicit ``timeout`` (microseconds, Triton's argument) can only
shorten it.

The client lives on an event loop of its own, on a thread of the model process, created at the
first call: ``exec`` waits on it from ``execute``'s thread, ``async_exec`` from the model's own
loop. Errors never raise: they come back as ``InferenceResponse.error()``, as in Triton.

A decoupled call (``exec(decoupled=True)``) opens the called request's frames as a stream
(``workers.python.bls_stream``). A non-decoupled call to a decoupled model is refused, as
Triton refuses it. Every call is recorded as a child of the calling requests
(``keys.cancel_children``, beside its submission), so that cancelling a caller cancels its BLS
calls; a call made for callers all cancelled already is marked cancelled and answered CANCELLED.
The called model is resolved from a cached view of the fleet (``workers.python.bls_models``).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any

import numpy as np

from shared.fleet import cancel_marks, submission
from shared.fleet.change_feed import ChangeFeed
from shared.fleet.replies import ReplyRouter
from shared.fleet.sequence_admission import SequenceAdmission
from shared.model_config import ModelConfig
from shared.model_config.input_check import check_inputs
from shared.model_config.sequences import sequence_spec
from shared.runtime import redis_conn
from shared.runtime.ids import new_id
from shared.runtime.settings import Settings
from shared.wire import sequence_params, tensors
from shared.wire.envelope import Reply
from shared.wire.errors import ConchError, ErrorCode
from shared.wire.queue_ticket import queue_ticket
from workers.python import bls_caller
from workers.python.bls_caller import Caller, adopt
from workers.python.bls_future import run_threadsafe
from workers.python.bls_models import BlsModels
from workers.python.bls_stream import BlsStream

# Without a calling request (a BLS call from initialize), a call may take this long.
DEFAULT_TIMEOUT_MS = 30_000


class BlsSettings(Settings, kw_only=True):
    """Read in the model process (it inherits the worker's environment)."""

    __prefix__ = "CONCH_WORKER_"

    # A BLS call is refused at once only when no worker of the called model has been ready
    # within this bound (as the gateway's admission does).
    gone_bound_ms: int = 30_000
    # The worker's model control mode: pb_utils.load_model/unload_model work only in explicit.
    model_control_mode: str = "none"
    # The BLS client's view of the models (``workers.python.bls_models``) is re-read when the
    # change feed announces a change; this is the safety poll that catches a lost notice (ms).
    bls_refresh_interval_ms: int = 10_000


class BlsClient:
    def __init__(self, settings: BlsSettings):
        self.settings = settings
        self._loop = asyncio.new_event_loop()
        thread = threading.Thread(target=self._loop.run_forever, name="bls", daemon=True)
        thread.start()
        asyncio.run_coroutine_threadsafe(self._setup(), self._loop).result(timeout=30)

    async def _setup(self) -> None:
        url = self.settings.redis_url
        self.redis = redis_conn.connect(url, max_connections=16, name="conch-bls")
        self._direct = self.settings.direct_path
        self._sequences = SequenceAdmission(self.redis, self.settings.gone_bound_ms)
        owner = f"bls-{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._replies = ReplyRouter(url, owner)
        self._feed = ChangeFeed(
            url, self.settings.bls_refresh_interval_ms / 1000, name="conch-bls-changes"
        )
        self.models = BlsModels(self.redis, self._feed)
        self._tasks = [
            asyncio.create_task(self._replies.run()),
            asyncio.create_task(self._feed.run()),
        ]

    def close(self) -> None:
        """Stop the reply reader and the loop (tests; a model process just exits)."""

        async def stop() -> None:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self.redis.aclose()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)

    def submit(
        self,
        model: str,
        version: int,
        inputs: list[tuple[str, np.ndarray]],
        outputs: list[str],
        parameters: dict[str, Any],
        timeout_us: int,
        caller: Caller,
    ) -> Future[Reply]:
        call = self._call(model, version, inputs, outputs, parameters, timeout_us, caller)
        return run_threadsafe(call, self._loop)  # the caller woken in the reply's loop turn

    def open_stream(
        self,
        model: str,
        version: int,
        inputs: list[tuple[str, np.ndarray]],
        outputs: list[str],
        parameters: dict[str, Any],
        timeout_us: int,
        caller: Caller,
    ) -> BlsStream:
        """A decoupled call: its responses, as the called model sends them."""
        stream = BlsStream(self._loop, self.redis, self._replies, model, new_id())
        call = self._call(
            model, version, inputs, outputs, parameters, timeout_us, caller, stream=stream
        )
        stream.opened = asyncio.run_coroutine_threadsafe(call, self._loop)
        return stream

    def run(self, call: Coroutine[Any, Any, Any]) -> Any:
        """Run a coroutine of this client's (``bls_control``: a load or an unload) on its loop
        and wait for it; the view of the models is re-read after it, even when it failed (a
        call made next sees what it did, not the view from before)."""

        async def then_refresh() -> Any:
            try:
                return await call
            finally:
                await self.models.refresh()

        return asyncio.run_coroutine_threadsafe(then_refresh(), self._loop).result()

    def is_model_ready(self, model: str, version: int) -> bool:
        """From the client's view of the models, without leaving the caller's thread while
        that view is current; read first otherwise."""
        known = self.models.ready_now(model, version)
        if known is not None:
            return known
        ready = self.models.ready(model, version)
        return asyncio.run_coroutine_threadsafe(ready, self._loop).result(timeout=10)

    async def _call(
        self,
        model: str,
        version: int,
        inputs: list[tuple[str, np.ndarray]],
        outputs: list[str],
        parameters: dict[str, Any],
        timeout_us: int,
        caller: Caller,
        stream: BlsStream | None = None,
    ) -> Reply:
        """One call: its reply, or (``stream``) an empty reply once it is queued, its frames
        going to the stream; an error reply either way when it could not be made."""
        now = int(time.time() * 1000)
        deadline = caller.deadline_ms or now + DEFAULT_TIMEOUT_MS
        if timeout_us > 0:
            deadline = min(deadline, now + timeout_us // 1000)
        request_id = stream.request_id if stream is not None else new_id()
        try:
            config, number = await self.models.resolve(model, version)
            spec = sequence_spec(config)
            if spec is not None and not sequence_params.lenient(parameters).in_sequence:
                raise ConchError(
                    ErrorCode.INVALID_ARG,
                    f"inference request to model '{model}' must specify a non-zero or non-empty "
                    "correlation ID (pb_utils.InferenceRequest(..., correlation_id=...))",
                )
            if config.decoupled and stream is None:
                raise ConchError(
                    ErrorCode.INVALID_ARG,
                    f"model '{model}' uses the decoupled transaction policy: call it with "
                    "exec(decoupled=True) (or async_exec(decoupled=True)) to get its responses",
                )
            future = None if stream is not None else self._replies.expect(request_id)
            if stream is not None:
                stream.begin(deadline)
            async with asyncio.timeout(max(deadline - now, 1) / 1000 + 0.05):
                request = dict(
                    request_id=request_id,
                    inputs=[tensors.from_numpy(name, array) for name, array in inputs],
                    outputs=outputs or config.output_names,
                    parameters=parameters,
                    reply_to=self._replies.stream,
                    now_ms=now,
                    deadline_ms=deadline,
                    priority=caller.priority,
                    tenant=caller.tenant,
                )
                if spec is None:
                    live = await self._admit(config, number, caller, request)
                elif live := await adopt(self.redis, caller, model, request_id, deadline):
                    await self._sequence_step(config, number, **request)
                if not live:
                    await cancel_marks.mark_cancelled(self.redis, model, request_id, deadline)
                    raise ConchError(
                        ErrorCode.CANCELLED,
                        "Request was cancelled: the calling request was cancelled before this "
                        "BLS call was made",
                    )
                if future is None:
                    return Reply(id=request_id, model=model, version=number, final=False)
                return await future
        except ConchError as exc:
            return _error(request_id, model, version, exc.code, exc.message)
        except TimeoutError:
            message = f"Request timeout expired: model '{model}' did not answer in time"
            return _error(request_id, model, version, ErrorCode.DEADLINE_EXCEEDED, message)
        finally:
            self._replies.forget(request_id)

    async def _admit(
        self, config: ModelConfig, version: int, caller: Caller, request: dict[str, Any]
    ) -> bool:
        """Record the call as a child of its callers and submit it, in one round trip (one
        pipeline, in this order); False when every caller was cancelled already."""
        prepared = submission.prepare(
            config, version, gone_ms=self.settings.gone_bound_ms, direct=self._direct, **request
        )
        model, request_id, deadline = config.name, request["request_id"], request["deadline_ms"]
        async with self.redis.pipeline(transaction=False) as pipe:
            bls_caller.queue_adoption(pipe, caller, model, request_id, deadline)
            submission.queue_admission(pipe, prepared)
            answers = await pipe.execute()
        prepared.refusal(int(answers[-1]))
        return bls_caller.adopted(caller, answers)

    async def _sequence_step(self, config: ModelConfig, version: int, **request: Any) -> None:
        """A step of a sequence model: the sequence admission the gateway uses (its holder keeps
        the sequence's order and state), with the call's correlation id and START/END flags."""
        inputs = request.pop("inputs")
        ordered, batch_size, shape_sig = check_inputs(config, inputs)
        if batch_size > 1:
            raise ConchError(
                ErrorCode.INVALID_ARG,
                f"inference request to model '{config.name}' must specify batch-size 1 due to "
                "requirements of sequence batcher",
            )
        params = sequence_params.parse(request["parameters"])
        ticket = queue_ticket(config, {**request["parameters"], "priority": request["priority"]})
        _, payload = submission.build(
            model=config.name,
            version=version,
            inputs=ordered,
            ticket=ticket,
            batch_size=batch_size,
            shape_sig=shape_sig,
            **request,
        )
        spec = sequence_spec(config)
        assert spec is not None, "only sequence models come here"
        if await self._sequences.admit(config, spec, params, payload) < 0:
            raise ConchError(
                ErrorCode.UNAVAILABLE,
                f"no live worker serves model '{config.name}' version {version}; start a worker "
                f"for backend '{config.backend}'",
            )


def _error(request_id: str, model: str, version: int, code: ErrorCode, message: str) -> Reply:
    return Reply(
        id=request_id, model=model, version=max(version, 0), error_code=code, error=message
    )


_client: BlsClient | None = None
_lock = threading.Lock()


def client() -> BlsClient:
    global _client
    with _lock:
        if _client is None:
            _client = BlsClient(BlsSettings.from_env())
        return _client
