"""An ASGI fast path for ``POST /v2/models/{m}[/versions/{v}]/infer``.

Inference is nearly all of a gateway's traffic, and a framework's routing, middleware and
parameter parsing cost more than the request's own work. This wrapper answers inference
directly from the ASGI scope and hands everything else (health, metadata, admin, lifespan) to
the Litestar application, which also serves inference itself when the fast path is off.
``gateway.rest.protocol`` goes one layer lower still and calls ``answer`` without ASGI. Both
check the headers before reading the body, and read the body no further than the limit.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from litestar import Litestar

from gateway.errors import REDIS_ERRORS, error_parts, internal_error, redis_unavailable
from gateway.rest import infer as rest_infer
from gateway.rest.disconnect import CancelOnDisconnect
from gateway.rest.request_limits import read_body
from shared.wire.errors import ConchError

log = logging.getLogger(__name__)

_INFER = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?/infer$")

InferRoute = tuple[str, str | None]


def infer_route(scope: dict[str, Any]) -> InferRoute | None:
    """(model, version) when the request is an inference, else None. One that accepts an
    event stream (streaming ``/infer``) is left to the Litestar route."""
    if scope["type"] != "http" or scope["method"] != "POST":
        return None
    match = _INFER.match(scope["path"])
    if match is None:
        return None
    for name, value in scope["headers"]:
        if name == b"accept" and b"text/event-stream" in value:
            return None
    return match.group(1), match.group(2)


class FastInferApp:
    def __init__(self, app: Litestar):
        self.app = app
        # Litestar's own attributes (state, routes) stay reachable through the wrapper.
        self.state = app.state

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)

    async def answer(
        self,
        route: InferRoute,
        raw_headers: Iterable[tuple[bytes, bytes]],
        receive: Callable[[], Awaitable[dict[str, Any]]],
        received: float | None = None,
    ) -> tuple[rest_infer.RestResponse | None, bool]:
        """The response to one inference request, and whether its whole body was read (if not,
        the connection must close after the response). None: the client left mid-body.

        The headers are checked before the body is read (``rest_infer.before_body``), and the
        body is read no further than the limit."""
        gateway = self.app.state.gateway
        dataplane, limit = gateway.dataplane, gateway.settings.max_request_bytes
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in raw_headers}
        try:
            caller = await rest_infer.before_body(dataplane, route[0], headers, limit)
        except ConchError as exc:
            return rest_infer.RestResponse(
                *error_parts(exc.code, exc.message, exc.retry_after_s)
            ), False
        except REDIS_ERRORS as exc:  # the table's second look met a Redis outage
            return rest_infer.RestResponse(*redis_unavailable(exc, f"infer {route[0]}")), False
        try:
            body = await read_body(receive, limit)
            if body is None:
                return None, False
            response = await rest_infer.infer(
                dataplane, route[0], route[1], headers, body, received, caller, limit
            )
            return response, True
        except ConchError as exc:  # the body crossed the limit
            return rest_infer.RestResponse(*error_parts(exc.code, exc.message)), False
        except Exception as exc:  # never let one request take the process's loop down
            return rest_infer.RestResponse(*internal_error(exc, "inference fast path")), True
        finally:
            dataplane.in_flight.leave()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        route = infer_route(scope)
        if route is None:
            await self.app(scope, receive, send)
            return
        received = time.perf_counter()
        watch = _WatchAfterBody(receive)
        async with watch.cancel_on_disconnect:
            response, _ = await self.answer(route, scope["headers"], watch.receive, received)
        if response is None or watch.cancel_on_disconnect.disconnected:
            return  # the client left
        await send(
            {
                "type": "http.response.start",
                "status": response.status,
                "headers": response_headers(response),
            }
        )
        await send({"type": "http.response.body", "body": response.body})


class _WatchAfterBody:
    """Starts watching for a disconnect once the body is read (before, ``receive`` is the
    body's own reader's)."""

    def __init__(self, receive: Any):
        self._receive = receive
        self.cancel_on_disconnect = CancelOnDisconnect(receive, deferred=True)
        self._armed = False

    async def receive(self) -> dict[str, Any]:
        message = await self._receive()
        if message["type"] == "http.request" and not message.get("more_body") and not self._armed:
            self._armed = True
            await self.cancel_on_disconnect.start()
        return message


def response_headers(response: rest_infer.RestResponse) -> list[tuple[bytes, bytes]]:
    headers = [
        (b"content-type", response.content_type.encode("latin-1")),
        (b"content-length", str(len(response.body)).encode("latin-1")),
    ]
    headers.extend(
        (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.items()
    )
    return headers
