"""Triton's ``triton_python_backend_utils`` for Conch's Python backend.

Longer than 300 lines because it is one API surface (Triton's module) that models import whole.

A model written for Triton's Python backend does ``import triton_python_backend_utils as
pb_utils``; the model process puts this file's directory on ``sys.path`` so that import finds
this module and the model runs unchanged. Names, signatures and behaviour follow Triton's
python_backend (``src/resources/triton_python_backend_utils.py`` and the pybind classes). Only
the model process imports it under the top-level name; the worker never does, so there is one
copy of every class (``isinstance`` checks on responses hold).

``MetricFamily``/``Metric`` (custom metrics) and ``ModelConfig`` (``auto_complete_config``) live
in the sibling modules ``pb_metrics`` and ``pb_model_config``.

Decoupled models (``model_transaction_policy { decoupled: true }``) answer through
``request.get_response_sender()``: the model process gives each request an
:class:`InferenceResponseSender` whose ``send`` goes to the worker at once (``stub_decoupled``).

BLS (``InferenceRequest.exec``/``async_exec``, decoupled or not) goes through the mesh
(``workers.python.bls_client``); a request with a ``correlation_id`` is a step of a sequence
(its ``flags`` START/END) and reaches a sequence model through the sequence admission the
gateway uses. Model control (``load_model``/``unload_model``) is the fleet's, as the repository
API's (``workers.python.bls_control``), in explicit mode only. An ``InferenceResponse``'s
``parameters`` (str, int or bool values) reach the client as the response's parameters.
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
from pb_metrics import Metric, MetricFamily  # noqa: F401 - part of the module's API
from pb_model_config import ModelConfig  # noqa: F401 - part of the module's API

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_CPU_PINNED = 1
TRITONSERVER_MEMORY_GPU = 2

# TRITONSERVER_DataType values, as pb_utils exposes them.
TRITONSERVER_TYPE_INVALID = 0
TRITONSERVER_TYPE_BOOL = 1
TRITONSERVER_TYPE_UINT8 = 2
TRITONSERVER_TYPE_UINT16 = 3
TRITONSERVER_TYPE_UINT32 = 4
TRITONSERVER_TYPE_UINT64 = 5
TRITONSERVER_TYPE_INT8 = 6
TRITONSERVER_TYPE_INT16 = 7
TRITONSERVER_TYPE_INT32 = 8
TRITONSERVER_TYPE_INT64 = 9
TRITONSERVER_TYPE_FP16 = 10
TRITONSERVER_TYPE_FP32 = 11
TRITONSERVER_TYPE_FP64 = 12
TRITONSERVER_TYPE_BYTES = 13
TRITONSERVER_TYPE_BF16 = 14

_NUMPY_BY_TRITON: dict[int, type] = {
    TRITONSERVER_TYPE_BOOL: np.bool_,
    TRITONSERVER_TYPE_UINT8: np.uint8,
    TRITONSERVER_TYPE_UINT16: np.uint16,
    TRITONSERVER_TYPE_UINT32: np.uint32,
    TRITONSERVER_TYPE_UINT64: np.uint64,
    TRITONSERVER_TYPE_INT8: np.int8,
    TRITONSERVER_TYPE_INT16: np.int16,
    TRITONSERVER_TYPE_INT32: np.int32,
    TRITONSERVER_TYPE_INT64: np.int64,
    TRITONSERVER_TYPE_FP16: np.float16,
    TRITONSERVER_TYPE_FP32: np.float32,
    TRITONSERVER_TYPE_FP64: np.float64,
    TRITONSERVER_TYPE_BYTES: np.object_,
}
_TRITON_BY_CONFIG_NAME = {
    "TYPE_BOOL": TRITONSERVER_TYPE_BOOL,
    "TYPE_UINT8": TRITONSERVER_TYPE_UINT8,
    "TYPE_UINT16": TRITONSERVER_TYPE_UINT16,
    "TYPE_UINT32": TRITONSERVER_TYPE_UINT32,
    "TYPE_UINT64": TRITONSERVER_TYPE_UINT64,
    "TYPE_INT8": TRITONSERVER_TYPE_INT8,
    "TYPE_INT16": TRITONSERVER_TYPE_INT16,
    "TYPE_INT32": TRITONSERVER_TYPE_INT32,
    "TYPE_INT64": TRITONSERVER_TYPE_INT64,
    "TYPE_FP16": TRITONSERVER_TYPE_FP16,
    "TYPE_FP32": TRITONSERVER_TYPE_FP32,
    "TYPE_FP64": TRITONSERVER_TYPE_FP64,
    "TYPE_STRING": TRITONSERVER_TYPE_BYTES,
}


class TritonModelException(Exception):
    """Raised by a model to fail initialize, execute or finalize."""


class TritonError:
    """An error attached to one response; ``code`` is one of the class constants."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7
    CODE_NAMES = (
        "UNKNOWN",
        "INTERNAL",
        "NOT_FOUND",
        "INVALID_ARG",
        "UNAVAILABLE",
        "UNSUPPORTED",
        "ALREADY_EXISTS",
        "CANCELLED",
    )

    def __init__(self, msg: str, code: int = INTERNAL):
        self._msg = str(msg)
        self._code = int(code)

    def message(self) -> str:
        return self._msg

    def code(self) -> int:
        return self._code

    def __repr__(self) -> str:
        return f"TritonError({self._msg!r}, {self.CODE_NAMES[self._code]})"


class Tensor:
    """A named NumPy array; BYTES tensors are object arrays of ``bytes``."""

    def __init__(self, name: str, tensor: Any):
        if not isinstance(tensor, np.ndarray):
            raise TritonModelException(
                f"Tensor '{name}' must be created from a numpy.ndarray, got {type(tensor)}"
            )
        self._name = name
        self._array = tensor

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def triton_dtype(self) -> int | None:  # None: a dtype Triton has no type for
        return numpy_to_triton_type(self._array.dtype)

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        return self._array.__dlpack__()

    def __dlpack__(self, stream: Any = None) -> Any:
        return self._array.__dlpack__()

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._array.__dlpack_device__()

    @staticmethod
    def from_dlpack(name: str, capsule: Any) -> Tensor:
        """CPU DLPack producers only (e.g. a torch CPU tensor); outputs travel as host bytes."""
        return Tensor(name, np.from_dlpack(capsule))


class InferenceRequest:
    """What ``execute`` receives; the constructor has BLS's signature."""

    def __init__(
        self,
        model_name: str = "",
        requested_output_names: Sequence[str] = (),
        inputs: Sequence[Tensor] = (),
        request_id: str = "",
        correlation_id: int | str = 0,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: Any = None,
        trace: Any = None,
        parameters: dict[str, Any] | str | None = None,
    ):
        self._model_name = model_name
        self._requested = list(requested_output_names)
        self._inputs = list(inputs)
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._flags = flags
        self._timeout = timeout
        self._model_version = model_version
        self._parameters = _json(parameters)
        # Set by the model process for a request it received (not for a BLS request).
        self._sender: InferenceResponseSender | None = None
        self._cancelled: Any = None
        # A BLS request acts for the batch being executed when it is made (also when a thread
        # of a decoupled model calls exec after execute returned).
        self._caller = _current_caller()

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def requested_output_names(self) -> list[str]:
        return self._requested

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def set_flags(self, flags: int) -> None:
        self._flags = flags

    def timeout(self) -> int:
        return self._timeout

    def parameters(self) -> str:
        """The request's parameters as a JSON string, as in Triton."""
        return self._parameters

    def model_name(self) -> str:
        return self._model_name

    def is_cancelled(self) -> bool:
        """True once the client disconnected or cancelled, within about 50 ms (the worker
        polls the cancel keys of running requests), in ``execute`` and, for decoupled models,
        after it."""
        return bool(self._cancelled and self._cancelled(self._request_id))

    def trace(self) -> None:
        return None

    def get_response_sender(self) -> InferenceResponseSender:
        if self._sender is None:
            raise TritonModelException(
                "get_response_sender is only available for requests of a model with "
                "model_transaction_policy { decoupled: true }"
            )
        return self._sender

    def exec(self, decoupled: bool = False) -> Any:
        """BLS: run this request on ``model_name`` through the mesh (``workers.python.bls_client``)
        and wait for its response; an error comes back as ``response.error()``. With
        ``decoupled=True``: an iterator of the responses as the called model sends them (the
        last may be empty: the final flag sent alone)."""
        if decoupled:
            return _bls_responses(self._bls_call(stream=True))
        return _bls_response(self._bls_call(stream=False).result())

    async def async_exec(self, decoupled: bool = False) -> Any:
        """``exec`` for ``async def execute``; ``decoupled=True`` gives an async iterator."""
        import asyncio

        if decoupled:
            return _AsyncResponses(self._bls_call(stream=True))
        return _bls_response(await asyncio.wrap_future(self._bls_call(stream=False)))

    def _bls_call(self, stream: bool) -> Any:
        from workers.python import bls_caller, bls_client

        client = bls_client.client()
        call = client.open_stream if stream else client.submit
        parameters = json.loads(self._parameters or "{}")
        if self._correlation_id not in (0, ""):  # a step of a sequence, as Triton sends it
            parameters["sequence_id"] = self._correlation_id
            parameters["sequence_start"] = bool(
                self._flags & TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
            )
            parameters["sequence_end"] = bool(self._flags & TRITONSERVER_REQUEST_FLAG_SEQUENCE_END)
        return call(
            self._model_name,
            self._model_version,
            [(t.name(), t.as_numpy()) for t in self._inputs],
            self._requested,
            parameters,
            self._timeout,
            self._caller if self._caller is not None else bls_caller.current,
        )


def _current_caller() -> Any:
    try:
        from workers.python import bls_caller
    except ImportError:  # pb_utils imported alone (no BLS possible)
        return None
    return bls_caller.current


def _bls_responses(stream: Any) -> Any:
    """The responses of a decoupled BLS call; leaving early cancels the call."""
    try:
        while True:
            reply = stream.next_sync()
            yield _bls_response(reply)
            if reply.final or reply.error_code:
                return
    finally:
        stream.close()


class _AsyncResponses:
    """``async for response in await request.async_exec(decoupled=True)``."""

    def __init__(self, stream: Any):
        self._stream = stream
        self._done = False

    def __aiter__(self) -> _AsyncResponses:
        return self

    async def __anext__(self) -> InferenceResponse:
        import asyncio

        if self._done:
            raise StopAsyncIteration
        call = asyncio.run_coroutine_threadsafe(self._stream.next(), self._stream.loop)
        reply = await asyncio.wrap_future(call)
        if reply.final or reply.error_code:
            self._done = True
        return _bls_response(reply)

    async def aclose(self) -> None:
        self._done = True
        self._stream.close()

    def __del__(self) -> None:
        if not self._done:
            self._stream.close()


class InferenceResponse:
    """Output tensors for one request, or an error that fails that request only."""

    def __init__(
        self,
        output_tensors: Sequence[Tensor] = (),
        error: TritonError | None = None,
        parameters: dict[str, Any] | str | None = None,
    ):
        self._outputs = list(output_tensors)
        self._error = error
        self._parameters = _json(_checked_parameters(parameters))

    def output_tensors(self) -> list[Tensor]:
        return self._outputs

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return self._parameters


def _bls_response(reply: Any) -> InferenceResponse:
    from shared.wire import tensors

    if reply.error_code:
        names = TritonError.CODE_NAMES
        code = (
            names.index(reply.error_code) if reply.error_code in names else TritonError.UNAVAILABLE
        )
        return InferenceResponse(error=TritonError(reply.error, code))
    return InferenceResponse(
        [Tensor(t.name, tensors.to_numpy(t)) for t in reply.outputs], parameters=reply.parameters
    )


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """Triton's ``pb_utils.is_model_ready``: some live instance of the mesh serves the model (the
    version given, or any)."""
    from workers.python import bls_client

    version = int(model_version) if str(model_version).strip() else -1
    return bls_client.client().is_model_ready(model_name, version)


def load_model(
    model_name: str, config: str | None = None, files: dict[str, bytes] | None = None
) -> None:
    """Triton's ``pb_utils.load_model``: load (or reload) a model across the fleet, with an
    optional config override (JSON) and model files (``"file:<version>/<name>"`` -> bytes);
    returns once every live worker acted. Only in explicit model control mode."""
    from workers.python import bls_client, bls_control

    _control(lambda: bls_control.check_mode(_mode(), "load", model_name))
    client = bls_client.client()

    def run() -> None:
        override, written = bls_control.load_request(model_name, config, files)
        client.run(bls_control.load(client.redis, model_name, override, written))

    _control(run)


def unload_model(model_name: str) -> None:
    """Triton's ``pb_utils.unload_model``: unload every version of a model across the fleet.
    Only in explicit model control mode."""
    from workers.python import bls_caller, bls_client, bls_control

    _control(lambda: bls_control.check_mode(_mode(), "unload", model_name))
    client = bls_client.client()
    caller = bls_caller.current.model
    _control(lambda: client.run(bls_control.unload(client.redis, model_name, caller)))


def _mode() -> str:
    from workers.python import bls_client

    return bls_client.BlsSettings.from_env().model_control_mode.strip().lower()


def _control(run: Any) -> None:
    """Model control errors raise TritonModelException, as in Triton."""
    from shared.wire.errors import ConchError

    try:
        run()
    except ConchError as exc:
        raise TritonModelException(exc.message) from None


class InferenceResponseSender:
    """Sends the responses of one request of a decoupled model, from any thread, also after
    ``execute`` returned; ``TRITONSERVER_RESPONSE_COMPLETE_FINAL`` closes it."""

    def __init__(self, request_id: str, emit: Any, cancelled: Any):
        self._request_id = request_id
        self._emit = emit  # (request_id, response | None, final) -> None
        self._cancelled = cancelled
        self._closed = False

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if self._closed:
            raise TritonModelException("Unable to send response. Response sender has been closed.")
        final = bool(flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        if response is None and not final:
            raise TritonModelException(
                "Inference Response object cannot be None unless flags is "
                "TRITONSERVER_RESPONSE_COMPLETE_FINAL"
            )
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException(
                f"send expects a pb_utils.InferenceResponse, got {type(response).__name__}"
            )
        if final:
            self._closed = True
        self._emit(self._request_id, response, final)

    def is_cancelled(self) -> bool:
        return bool(self._cancelled(self._request_id))

    def is_closed(self) -> bool:
        return self._closed


class LogLevel:
    """``pb_utils.Logger.LogLevel``: the levels a model may log at."""

    INFO = logging.INFO
    WARNING = logging.WARNING
    ERROR = logging.ERROR
    VERBOSE = logging.DEBUG


class Logger:
    """Log lines from the model, as ``pb_utils.Logger.log_info(msg)`` etc.; they go to the
    worker's log (structured, with the model and instance), at the fleet's log level
    (``v2/logging``)."""

    LogLevel = LogLevel
    INFO = logging.INFO
    WARNING = logging.WARNING
    ERROR = logging.ERROR
    VERBOSE = logging.DEBUG
    _log = logging.getLogger("conch.python_model")

    @classmethod
    def log(cls, message: str, level: int = INFO) -> None:
        cls._log.log(level, message)

    @classmethod
    def log_info(cls, message: str) -> None:
        cls._log.info(message)

    @classmethod
    def log_warn(cls, message: str) -> None:
        cls._log.warning(message)

    @classmethod
    def log_error(cls, message: str) -> None:
        cls._log.error(message)

    @classmethod
    def log_verbose(cls, message: str) -> None:
        cls._log.debug(message)


def _checked_parameters(parameters: dict[str, Any] | str | None) -> dict[str, Any] | str | None:
    """Triton's rule for a response's parameters: str keys; bool, int or str values (they
    reach the client as the response's ``parameters``)."""
    given = json.loads(parameters) if isinstance(parameters, str) and parameters else parameters
    if given is None or given == "":
        return None
    if not isinstance(given, dict):
        raise TritonModelException(
            f"InferenceResponse parameters must be a dict (or its JSON), got {type(given).__name__}"
        )
    for key, value in given.items():
        if not isinstance(key, str):
            raise TritonModelException(
                f"Expect parameters keys to have type str, found type {type(key).__name__}"
            )
        if not isinstance(value, bool | int | str):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type "
                f"{type(value).__name__} (parameter '{key}')"
            )
    return given


def _json(parameters: dict[str, Any] | str | None) -> str:
    return parameters if isinstance(parameters, str) else json.dumps(parameters or {})


def get_input_tensor_by_name(request: InferenceRequest, name: str) -> Tensor | None:
    return next((t for t in request.inputs() if t.name() == name), None)


def get_output_tensor_by_name(response: InferenceResponse, name: str) -> Tensor | None:
    return next((t for t in response.output_tensors() if t.name() == name), None)


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((c for c in model_config.get("input", []) if c["name"] == name), None)


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((c for c in model_config.get("output", []) if c["name"] == name), None)


# The model's version directory, set by the model process (``stub``) before the model loads.
_model_dir = ""


def get_model_dir() -> str:
    """The directory of the model's version (``<repository>/<model>/<version>``), as Triton's
    stub answers it: where a Python-based backend's model finds its data (vLLM's model.json)."""
    return _model_dir


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


def triton_string_to_numpy(triton_type_string: str) -> type | None:
    """``"TYPE_FP32"`` -> ``np.float32``; ``"TYPE_STRING"`` -> ``np.object_``."""
    return _NUMPY_BY_TRITON.get(_TRITON_BY_CONFIG_NAME.get(triton_type_string, 0))


def triton_to_numpy_type(data_type: int) -> type | None:
    return _NUMPY_BY_TRITON.get(data_type)


def numpy_to_triton_type(data_type: Any) -> int | None:
    dtype = np.dtype(data_type)
    if dtype.kind in "OSU":
        return TRITONSERVER_TYPE_BYTES
    for triton_type, np_type in _NUMPY_BY_TRITON.items():
        if np_type is not np.object_ and np.dtype(np_type) == dtype:
            return triton_type
    return None


def serialize_byte_tensor(input_tensor: np.ndarray) -> Any:
    """Length-prefixed (4-byte little-endian) elements in C order, as a 0-d object array."""
    if input_tensor.size == 0:
        return ()
    if input_tensor.dtype != np.object_ and input_tensor.dtype.type != np.bytes_:
        raise TritonModelException("cannot serialize bytes tensor: invalid datatype")
    parts: list[bytes] = []
    for item in input_tensor.reshape(-1, order="C"):
        raw = item if isinstance(item, bytes) else str(item).encode("utf-8")
        parts.append(struct.pack("<I", len(raw)))
        parts.append(raw)
    return np.asarray(b"".join(parts), dtype=np.object_)


def deserialize_bytes_tensor(encoded_tensor: bytes) -> np.ndarray:
    items: list[bytes] = []
    offset = 0
    while offset < len(encoded_tensor):
        (length,) = struct.unpack_from("<I", encoded_tensor, offset)
        offset += 4
        items.append(bytes(encoded_tensor[offset : offset + length]))
        offset += length
    return np.array(items, dtype=np.object_)
