"""One model process of the Python backend: spawn it, talk to it over its pipe, stop it.

A death of the process while the worker waits (``os._exit``, a signal) reads as
:class:`ModelProcessDied`, naming how it exited.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from shared.errors import ConchError, ErrorCode
from workers.python import ipc, stub

CONTEXT = mp.get_context("spawn")  # never fork a threaded worker


class ModelProcessDied(Exception):
    """The model process exited while the worker waited for it."""


class ModelProcess:
    """One spawned stub process and the worker's end of its pipe."""

    def __init__(self, init: dict[str, Any], start_timeout_s: float):
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

    def call(self, message: Any) -> Any:
        ipc_send(self.conn, message)
        return self._wait(None, "execute")

    def _wait(self, timeout_s: float | None, phase: str) -> Any:
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
        if finalize_timeout_s > 0 and self.process.is_alive():
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
