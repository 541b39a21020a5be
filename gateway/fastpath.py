"""An ASGI fast path for ``POST /v2/models/{m}[/versions/{v}]/infer``.

Inference is nearly all of a gateway's traffic, and a framework's routing, middleware and
parameter parsing cost more than the request's own work. This wrapper answers inference
directly from the ASGI scope and hands everything else (health, metadata, admin, lifespan) to
the Litestar application, which also serves inference itself when the fast path is off.
``gateway.http_protocol`` goes one layer lower still and calls ``exchange`` without ASGI.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable
from typing import Any

from litestar import Litestar

from gateway import rest_infer
from gateway.errors import error_parts
from shared.errors import ErrorCode

log = logging.getLogger(__name__)

_INFER = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?/infer$")

InferRoute = tuple[str, str | None]


def infer_route(scope: dict[str, Any]) -> InferRoute | None:
    """(model, version) when the request is an inference, else None."""
    if scope["type"] != "http" or scope["method"] != "POST":
        return None
    match = _INFER.match(scope["path"])
    return None if match is None else (match.group(1), match.group(2))


class FastInferApp:
    def __init__(self, app: Litestar):
        self.app = app
        # Litestar's own attributes (state, routes) stay reachable through the wrapper.
        self.state = app.state

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)

    async def exchange(
        self,
        route: InferRoute,
        raw_headers: Iterable[tuple[bytes, bytes]],
        body: bytes,
        received: float | None = None,
    ) -> rest_infer.RestResponse:
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in raw_headers}
        try:
            return await rest_infer.infer(
                self.app.state.gateway.dataplane, route[0], route[1], headers, body, received
            )
        except Exception as exc:  # never let one request take the process's loop down
            log.exception("unhandled error on the inference fast path")
            return rest_infer.RestResponse(
                *error_parts(ErrorCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}")
            )

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        route = infer_route(scope)
        if route is None:
            await self.app(scope, receive, send)
            return
        received = time.perf_counter()
        body = await read_body(receive)
        if body is None:
            return  # the client left before its request was whole
        response = await self.exchange(route, scope["headers"], body, received)
        await send(
            {
                "type": "http.response.start",
                "status": response.status,
                "headers": response_headers(response),
            }
        )
        await send({"type": "http.response.body", "body": response.body})


def response_headers(response: rest_infer.RestResponse) -> list[tuple[bytes, bytes]]:
    headers = [
        (b"content-type", response.content_type.encode("latin-1")),
        (b"content-length", str(len(response.body)).encode("latin-1")),
    ]
    headers.extend(
        (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.items()
    )
    return headers


async def read_body(receive: Any) -> bytes | None:
    """The whole request body from ASGI ``receive``; None if the client disconnected."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
