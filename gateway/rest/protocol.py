"""uvicorn's httptools protocol, with ``POST .../infer`` answered below the ASGI layer.

Profiles of a gateway at c=64 showed the ASGI cycle itself as a large share of its CPU: two
messages per response, each its own socket write (each a system call that wakes the client), and
the coroutine plumbing of ``receive``/``send``. Inference requests here skip all of it: the body
is read through uvicorn's own cycle (so 100-continue, flow control, pipelining and keep-alive
stay uvicorn's), the exchange is the same ``rest_infer.infer`` that the ASGI fast path and the
Litestar route call, and the whole response goes out in one write. Everything else (health,
metadata, admin, repository, lifespan) is the Litestar application, unchanged.

The hook is ``HttpToolsProtocol._start_asgi_task``: the one place where uvicorn starts a
request, for the first request of a connection and for pipelined ones alike. It is private, and
the hook also reads the request cycle's private fields, so it holds for one uvicorn release only:
``UVICORN_VERSION``, which ``pyproject.toml`` and ``docker/constraints.txt`` pin. Importing this
module with any other uvicorn, or one without the hooked method, fails at once with both versions
named (``tests/unit/test_uvicorn_hook_pin.py`` fails the same way), so an upgrade is a deliberate
act: read uvicorn's ``httptools_impl`` again, then change the constant and both pins together.
``tests/e2e`` exercise this path for every inference.
"""

from __future__ import annotations

import importlib.metadata
import logging
import time
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from gateway.rest.fastpath import FastInferApp, infer_route, response_headers
from gateway.rest.infer import RestResponse

log = logging.getLogger(__name__)

# The uvicorn release this hook was written against (and the one pyproject.toml pins).
UVICORN_VERSION = "0.54.0"
HOOKED_METHOD = "_start_asgi_task"


def check_uvicorn(installed: str, protocol: type) -> None:
    """Refuse a uvicorn the hook was not written against, naming both versions."""
    if installed != UVICORN_VERSION:
        raise RuntimeError(
            f"gateway.rest.protocol overrides uvicorn's private "
            f"HttpToolsProtocol.{HOOKED_METHOD} as uvicorn {UVICORN_VERSION} has it, but uvicorn "
            f"{installed} is installed: install uvicorn=={UVICORN_VERSION}, or check the hook "
            f"against uvicorn {installed} and change UVICORN_VERSION with the pins in "
            "pyproject.toml and docker/constraints.txt"
        )
    if not callable(getattr(protocol, HOOKED_METHOD, None)):
        raise RuntimeError(
            f"uvicorn {installed} has no HttpToolsProtocol.{HOOKED_METHOD}, which "
            "gateway.rest.protocol overrides to answer inference below the ASGI layer"
        )


check_uvicorn(importlib.metadata.version("uvicorn"), HttpToolsProtocol)


class InferHttpProtocol(HttpToolsProtocol):
    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        scope = cycle.scope
        route = infer_route(scope) if isinstance(self.app, FastInferApp) else None
        if route is None:
            super()._start_asgi_task(cycle, app)
            return
        received = time.perf_counter()  # the request's headers are in; the clock starts
        task = self.loop.create_task(self._answer_infer(cycle, route, received))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)
        self._infer_task = task

    def connection_lost(self, exc: Exception | None) -> None:
        """The client left: an inference still being answered is cancelled (the data plane
        marks it cancelled in Redis, so it never runs or stops where it runs)."""
        task = getattr(self, "_infer_task", None)
        if task is not None and not task.done():
            task.cancel()
        super().connection_lost(exc)

    async def _answer_infer(
        self, cycle: Any, route: tuple[str, str | None], received: float
    ) -> None:
        try:
            # uvicorn's own receive: 100-continue, flow control and disconnects stay its own.
            response, whole = await self.app.answer(
                route, cycle.scope["headers"], cycle.receive, received
            )
            if response is None:
                return
            if not whole:  # refused before its body was read: the rest of it is not read
                cycle.keep_alive = False
            if cycle.flow.write_paused and not cycle.disconnected:
                await cycle.flow.drain()
            _write_response(cycle, response)
        except Exception:  # the connection goes, the process's loop stays
            log.exception("unhandled error while answering an inference request")
            cycle.transport.close()
        finally:
            cycle.on_response = lambda: None


def _write_response(cycle: Any, response: RestResponse) -> None:
    """The whole response in one write (a plain function: no coroutine per response)."""
    if cycle.disconnected:
        return
    parts = [STATUS_LINE[response.status]]
    for name, value in [*cycle.default_headers, *response_headers(response)]:
        parts += [name, b": ", value, b"\r\n"]
    if not cycle.keep_alive:
        parts.append(b"connection: close\r\n")
    parts += [b"\r\n", response.body]
    cycle.transport.write(b"".join(parts))
    cycle.response_started = True
    cycle.response_complete = True
    cycle.message_event.set()
    if not cycle.keep_alive:
        cycle.transport.close()
    cycle.on_response()


__all__ = ["InferHttpProtocol"]
