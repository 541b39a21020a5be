"""The model process's side of a decoupled model: response senders and a pipe shared by threads.

A decoupled model answers through ``request.get_response_sender()``, from ``execute`` or from
threads of its own after ``execute`` returned. Each ``send`` goes to the worker at once as a
``("frame", request_id, outputs | None, error | None, final)`` message, so a response reaches
its client while the model still works on the next one. Several threads write to the one pipe,
so writes take a lock; a reader thread takes the worker's ``("cancel", [ids])`` messages at any
time (``is_cancelled()`` turns true) and queues the others (execute, finalize) for the main loop.
"""

from __future__ import annotations

import json
import queue
import threading
from multiprocessing.connection import Connection
from types import ModuleType
from typing import Any

import numpy as np

from workers.python import ipc

_GONE = ("gone", None)


class Link:
    """The pipe to the worker, for several threads."""

    def __init__(self, conn: Connection):
        self._conn = conn
        self._lock = threading.Lock()
        self._inbox: queue.Queue[Any] = queue.Queue()
        self._cancelled: set[str] = set()
        threading.Thread(target=self._read, name="worker-pipe", daemon=True).start()

    def send(self, message: Any) -> None:
        with self._lock:
            ipc.send(self._conn, message)

    def recv(self) -> Any:
        message = self._inbox.get()
        if message is _GONE:
            raise EOFError("the worker is gone")
        return message

    def is_cancelled(self, request_id: str) -> bool:
        return request_id in self._cancelled

    def forget(self, request_id: str) -> None:
        self._cancelled.discard(request_id)

    def _read(self) -> None:
        while True:
            try:
                message = ipc.recv(self._conn)
            except (EOFError, OSError):
                self._inbox.put(_GONE)
                return
            if message[0] == "cancel":
                self._cancelled.update(message[1])
            else:
                self._inbox.put(message)


def execute(
    pb_utils: ModuleType, model: Any, link: Link, requests: list[Any], run: Any, describe: Any
) -> None:
    """Give each request its sender and run ``execute``; requests whose sender is still open
    when ``execute`` fails get the error as their final response."""
    senders = []
    for request in requests:
        emit = _emitter(pb_utils, link, request.requested_output_names())
        sender = pb_utils.InferenceResponseSender(request.request_id(), emit, link.is_cancelled)
        request._sender = sender
        request._cancelled = link.is_cancelled
        senders.append(sender)
    try:
        returned = run(model.execute(requests))
        if returned is not None:
            raise pb_utils.TritonModelException(
                "Python model is using the decoupled mode and the execute function must "
                "return None."
            )
    except Exception as exc:
        message = str(exc) if isinstance(exc, pb_utils.TritonModelException) else describe(exc)
        for request, sender in zip(requests, senders, strict=True):
            if not sender.is_closed():
                sender._closed = True
                link.send(("frame", request.request_id(), None, ("INTERNAL", message), True))
                link.forget(request.request_id())


def _emitter(pb_utils: ModuleType, link: Link, requested: list[str]) -> Any:
    def emit(request_id: str, response: Any, final: bool) -> None:
        error = outputs = parameters = None
        if response is not None and response.has_error():
            problem = response.error()
            error = (pb_utils.TritonError.CODE_NAMES[problem.code()], problem.message())
        elif response is not None:
            produced = {t.name(): t.as_numpy() for t in response.output_tensors()}
            names = [n for n in requested if n in produced] or list(produced)
            outputs = {n: host_array(produced[n]) for n in names}
            parameters = json.loads(response.parameters() or "{}") or None
        link.send(("frame", request_id, outputs, error, final or error is not None, parameters))
        if final or error is not None:
            link.forget(request_id)

    return emit


def host_array(array: np.ndarray) -> np.ndarray:
    """BYTES outputs leave as object arrays of bytes, whatever string form the model used."""
    if array.dtype.kind not in "OSU":
        return np.ascontiguousarray(array)
    if array.dtype == object and all(isinstance(x, bytes) for x in array.flat):
        return array
    encoded = np.empty(array.size, dtype=object)
    encoded[:] = [bytes(x) if isinstance(x, bytes) else str(x).encode("utf-8") for x in array.flat]
    return encoded.reshape(array.shape)
