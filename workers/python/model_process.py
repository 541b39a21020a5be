"""One model process of the Python backend: spawn it, talk to it over its pipe, stop it.

A death of the process while the worker waits (``os._exit``, a signal) reads as
:class:`ModelProcessDied`, naming how it exited.

A decoupled model's process sends response frames at any time (``stub_decoupled``): for it a
reader thread hands each frame to ``on_frame`` as it arrives and queues the other answers for
``call``/``stop``; ``on_exit`` hears how the process ended, so that open streams end with it.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import signal
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from shared.wire.errors import ConchError, ErrorCode
from workers.python import ipc, stub

CONTEXT = mp.get_context("spawn")  # never fork a threaded worker


class ModelProcessDied(Exception):
    """The model process exited while the worker waited for it."""


class ModelProcess:
    """One spawned stub process and the worker's end of its pipe."""

    def __init__(
        self,
        init: dict[str, Any],
        start_timeout_s: float,
        on_frame: Callable[[Any], None] | None = None,
        on_exit: Callable[[str], None] | None = None,
    ):
        self._inbox: queue.Queue[Any] | None = None
        self._send_lock = threading.Lock()
        conn, child_conn = CONTEXT.Pipe(duplex=True)
        self.name = init["args"]["model_instance_name"]
        self.conn: Connection = conn
        self.process: BaseProcess = CONTEXT.Process(
            target=stub.main, args=(child_conn, init), name=f"pb-{self.name}", daemon=True
        )
        self.process.start()
        child_conn.close()  # so that the child's death reads as EOF here
        try:
            reply = self._wait(start_timeout_s, "initialize")
        except ModelProcessDied as exc:
            self.stop(0)
            raise ConchError(ErrorCode.INTERNAL, f"model instance '{self.name}': {exc}") from None
        if reply[0] != "ready":
            self.stop(5)
            raise ConchError(
                ErrorCode.INTERNAL, f"model instance '{self.name}' failed to initialize: {reply[1]}"
            )
        self.pid: int = reply[1]
        # The model's custom metrics as of initialize (pb_utils.MetricFamily), if any.
        self.custom_metrics: list[dict[str, Any]] | None = reply[2] if len(reply) > 2 else None
        if on_frame is not None:
            self._inbox = queue.Queue()
            threading.Thread(
                target=self._read,
                args=(on_frame, on_exit),
                name=f"frames-{self.name}",
                daemon=True,
            ).start()

    def call(self, message: Any) -> Any:
        self.send(message)
        return self._wait(None, "execute")

    def send(self, message: Any) -> None:
        """Send one message (from any thread)."""
        with self._send_lock:
            ipc_send(self.conn, message)

    def _read(self, on_frame: Callable[[Any], None], on_exit: Callable[[str], None] | None) -> None:
        assert self._inbox is not None
        while True:
            try:
                message = ipc.recv(self.conn)
            except (EOFError, OSError):
                break
            if message[0] == "frame":
                on_frame(message)
            else:
                self._inbox.put(message)
        self.process.join(5)
        how = f"the model process {exit_text(self.process)}"
        self._inbox.put(("died", how))
        if on_exit is not None:
            on_exit(how)

    def _wait(self, timeout_s: float | None, phase: str) -> Any:
        if self._inbox is not None:
            try:
                message = self._inbox.get(timeout=timeout_s)
            except queue.Empty:
                self.stop(0)
                raise ModelProcessDied(
                    f"no answer to {phase} within {timeout_s:.0f} s; stopped it"
                ) from None
            if message[0] == "died":
                self._inbox.put(message)  # every later wait hears it too
                raise ModelProcessDied(f"{message[1]} during {phase}")
            return message
        ready = wait([self.conn, self.process.sentinel], timeout_s)
        if self.conn in ready:
            try:
                return ipc.recv(self.conn)
            except (EOFError, OSError):
                pass
        elif not ready:
            self.stop(0)
            raise ModelProcessDied(f"no answer to {phase} within {timeout_s:.0f} s; stopped it")
        self.process.join(5)
        raise ModelProcessDied(f"the model process {exit_text(self.process)} during {phase}")

    def stop(self, finalize_timeout_s: float) -> str | None:
        """Ask for finalize (when a timeout is given), then make sure the process is gone."""
        error = None
        if finalize_timeout_s > 0 and self.process.is_alive() and self._inbox is not None:
            try:
                self.send(("finalize", None))
                _, error = self._wait(finalize_timeout_s, "finalize")
            except ModelProcessDied as exc:
                error = str(exc)
        elif finalize_timeout_s > 0 and self.process.is_alive():
            try:
                ipc_send(self.conn, ("finalize", None))
                if self.conn.poll(finalize_timeout_s):
                    _, error = ipc.recv(self.conn)
                else:
                    error = f"finalize did not return within {finalize_timeout_s:.0f} s"
            except (EOFError, OSError) as exc:
                error = f"the model process went away during finalize ({exc})"
        self.process.join(2 if finalize_timeout_s > 0 else 0)
        if self.process.is_alive():  # it ignores SIGTERM (see stub.main): kill it
            self.process.kill()
            self.process.join()
        self.conn.close()
        return error


def ipc_send(conn: Connection, message: Any) -> None:
    try:
        ipc.send(conn, message)
    except (BrokenPipeError, ConnectionResetError, OSError) as exc:
        raise ModelProcessDied(f"the model process is gone ({exc})") from None


def exit_text(process: BaseProcess) -> str:
    code = process.exitcode
    if code is None:
        return "closed its pipe"
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"
