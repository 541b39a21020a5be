"""The one REST inference path: ``POST /v2/models/{m}[/versions/{v}]/infer`` answered by a raw
ASGI app in front of the Litestar application.

Inference is nearly all of a gateway's traffic, and a framework's routing, middleware and
parameter parsing cost more than the request's own work, so this app answers it from the ASGI
scope and hands everything else (health, metadata, admin, lifespan, and ``/infer`` asking for an
event stream) to Litestar. ``answer`` is the whole exchange; how its response is written is the
server's: under the gateway's uvicorn, ``gateway.rest.protocol`` calls ``answer`` itself and
writes the response in one system call (measured worth it: see there); under any other ASGI
server (or uvicorn's plain ``httptools``), ``__call__`` sends it as two ASGI messages. Either
way the HTTP/1.1 semantics (keep-alive, pipelining, ``Expect: 100-continue``, chunked bodies,
flow control) are the server's, read through ASGI's ``receive``.

The headers are checked before the body is read (``rest_infer.before_body``), the body is read
no further than the limit, and a client that disconnects while its request runs gets it
cancelled (``gateway.rest.disconnect``: the one mechanism, ASGI's ``http.disconnect``; the data
plane then marks it cancelled in Redis). The exchange itself is ``gateway.rest.infer``.

Around the exchange, Triton's edge behaviour for every route: a restricted category
(``gateway.core.restricted``) is refused before anything else (inference here, the other routes
by the Litestar app's guard), and a successful inference response is compressed when
``Accept-Encoding`` asks (``gateway.rest.compression``). Only inference, as Triton:
``tritonclient``'s asyncio client sends aiohttp's ``Accept-Encoding: gzip, deflate`` on every
call and inflates only inference answers, so a compressed config or statistics answer would
break it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, cast

from litestar import Litestar

from gateway.core.restricted import INFERENCE, Restrictions
from gateway.errors import REDIS_ERRORS, error_parts, internal_error, redis_unavailable
from gateway.rest import compression
from gateway.rest import infer as rest_infer
from gateway.rest.disconnect import CancelOnDisconnect
from gateway.rest.request_limits import read_body
from shared.wire.errors import ConchError, ErrorCode

_INFER = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?/infer$")
# A refusal sent before the body was read: the rest of the body is never read, so the
# connection cannot carry another request.
_CLOSE = (b"connection", b"close")

InferRoute = tuple[str, str | None]
Receive = Callable[[], Awaitable[dict[str, Any]]]
# An ASGI application as this module sees one: scopes and messages are plain dicts.
ASGIApp = Callable[[dict[str, Any], Receive, Any], Awaitable[None]]


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
    """The gateway's ASGI application: inference here, the rest in ``self.app``."""

    def __init__(self, app: Litestar, restrictions: Restrictions | None = None):
        self.app = app
        restrictions = restrictions or Restrictions({}, grpc=False)
        self._infer_restriction = restrictions.get(INFERENCE)
        self._infer_refusal = (
            restrictions.refusal_text(self._infer_restriction) if self._infer_restriction else ""
        )
        # The same object, called for everything but inference. Litestar types its scope and
        # messages as TypedDicts; the server's are the plain dicts of this module's types.
        self._litestar = cast(ASGIApp, app)
        # Litestar's own attributes (state, routes) stay reachable through the wrapper.
        self.state = app.state

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Any) -> None:
        route = infer_route(scope)
        if route is None:
            await self._litestar(scope, receive, send)
            return
        received = time.perf_counter()  # the request's headers are in; the clock starts
        response, whole = await self.answer(route, scope["headers"], receive, received)
        if response is None:
            return  # the client left: nobody reads an answer
        headers = response_headers(response)
        if not whole:
            headers.append(_CLOSE)
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        await send({"type": "http.response.body", "body": response.body})

    async def answer(
        self,
        route: InferRoute,
        raw_headers: Iterable[tuple[bytes, bytes]],
        receive: Receive,
        received: float | None = None,
    ) -> tuple[rest_infer.RestResponse | None, bool]:
        """The response to one inference request, and whether its whole body was read (if not,
        the connection must close after the response). None: the client left."""
        gateway = self.state["gateway"]  # as a mapping: 0.2 us, where attribute access is 1
        dataplane, limit = gateway.dataplane, gateway.settings.max_request_bytes
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in raw_headers}
        if self._infer_restriction and not self._infer_restriction.met_by(headers):
            refusal = error_parts(ErrorCode.PERMISSION_DENIED, self._infer_refusal)
            return rest_infer.RestResponse(*refusal), False
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
            response = None
            # From here on ``receive`` only tells of a disconnect: it cancels the request.
            async with CancelOnDisconnect(receive):
                response = await rest_infer.infer(
                    dataplane, route[0], route[1], headers, body, received, caller, limit
                )
            accept = headers.get("accept-encoding")
            if accept is not None and response is not None and response.status == 200:
                encoding = compression.negotiate(accept)
                if encoding is not None:
                    response.body = await compression.compress(response.body, encoding)
                    response.headers["Content-Encoding"] = encoding
            return response, True
        except ConchError as exc:  # the body crossed the limit
            return rest_infer.RestResponse(*error_parts(exc.code, exc.message)), False
        except Exception as exc:  # never let one request take the process's loop down
            return rest_infer.RestResponse(*internal_error(exc, "inference")), True
        finally:
            dataplane.in_flight.leave()


def response_headers(response: rest_infer.RestResponse) -> list[tuple[bytes, bytes]]:
    headers = [
        (b"content-type", response.content_type.encode("latin-1")),
        (b"content-length", str(len(response.body)).encode("latin-1")),
    ]
    headers.extend(
        (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.items()
    )
    return headers
