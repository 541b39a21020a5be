"""uvicorn's httptools protocol, with ``POST .../infer`` answered below the ASGI layer: the
project's one hook into a library's private API, kept because it was measured to be worth it.

What it buys: uvicorn writes an ASGI response in two system calls (``http.response.start``
writes the head at once, then the body), which also wakes the client twice; here the whole
response goes out in one write, without the ``send`` coroutines. Measured against the same code
answering through ASGI only (``http="httptools"``), ``bench/alternate.sh``, both meshes on the
2-core VM (busy: 1.1-2.0 cores), means of the window pairs, gateway CPU per request: ``add_sub``
c=1 982 vs 1,028 us, p50 1.89 vs 2.03 ms (3 of 4 pairs the same way); ``mlp`` c=64 JSON 297 vs
333 us (2 of 3); binary 294 vs 296 us (even). The journal's "One REST inference path" has the
runs. A small lead, on the cells the project is furthest behind its peers (c=1 latency, the
gateway's CPU), so the hook stays until a release of uvicorn breaks it or the lead goes.

Everything but the write is the ASGI path's own: the exchange is ``FastInferApp.answer`` (the
headers checked before the body, the body read through uvicorn's own cycle, so 100-continue,
flow control, pipelining and keep-alive stay uvicorn's; a disconnect cancels the request
through ASGI's ``http.disconnect`` on that cycle's ``receive``, ``gateway.rest.disconnect``, as on
every route). Everything else (health, metadata, admin, repository, lifespan, event streams)
is the Litestar application.

The hook is ``HttpToolsProtocol._start_asgi_task``: the one place where uvicorn starts a
request, for the first request of a connection and for pipelined ones alike. It is private, and
the hook also reads the request cycle's private fields, so it holds for one uvicorn release only:
``UVICORN_VERSION``, the project's only exact pin (``pyproject.toml``; ``docker/constraints.txt``
has it too). Importing this module with any other uvicorn, or one without the hooked method,
fails at once with both versions named (``tests/unit/test_uvicorn_hook_pin.py`` fails the same
way), so an upgrade is a deliberate act: read uvicorn's ``httptools_impl`` again, then change the
constant and both pins together; or, if the hook no longer pays, delete this module and let
``gateway.runtime.serve`` ask for ``http="httptools"``: the ASGI path answers the same requests.
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
