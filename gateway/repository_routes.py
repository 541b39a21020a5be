"""The routes of Triton's model repository extension under ``/v2/repository/``: index, load and
unload across the fleet (``gateway.repository_control`` does the work).

These routes need the admin token unless ``CONCH_GATEWAY_REPOSITORY_REQUIRES_ADMIN=false``.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, Response, Router, post
from litestar.connection import ASGIConnection
from litestar.handlers import BaseRouteHandler

from gateway.admin_guard import ADMIN_SECURITY, admin_guard
from gateway.repository_control import RepositoryControl
from shared.errors import invalid

_json = msgspec.json.Encoder()


def _parameters(body: bytes) -> dict[str, Any]:
    if not body.strip():
        return {}
    try:
        decoded = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise invalid(f"request body is not valid JSON: {exc}") from None
    if not isinstance(decoded, dict):
        raise invalid("request body must be a JSON object")
    parameters = decoded.get("parameters", {})
    if not isinstance(parameters, dict):
        raise invalid("field 'parameters' must be a JSON object")
    return parameters


def repository_guard(
    connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler
) -> None:
    if connection.app.state.gateway.settings.repository_requires_admin:
        admin_guard(connection, handler)


def _control(request: Request) -> RepositoryControl:
    return request.app.state.gateway.repository


@post("/index", status_code=200, summary="Models in the repository and their state")
async def repository_index(request: Request) -> Response:
    body = await request.body()
    ready = False
    if body.strip():
        try:
            decoded = msgspec.json.decode(body)
        except msgspec.DecodeError as exc:
            raise invalid(f"request body is not valid JSON: {exc}") from None
        ready = bool(decoded.get("ready", False)) if isinstance(decoded, dict) else False
    entries = await _control(request).index(ready)
    return Response(content=_json.encode(entries), media_type="application/json")


@post("/models/{model:str}/load", status_code=200, summary="Load a model on every worker")
async def repository_load(request: Request, model: str) -> Response:
    await _control(request).load(model, _parameters(await request.body()))
    return Response(content=b"", status_code=200)


@post("/models/{model:str}/unload", status_code=200, summary="Unload a model on every worker")
async def repository_unload(request: Request, model: str) -> Response:
    await _control(request).unload(model, _parameters(await request.body()))
    return Response(content=b"", status_code=200)


def repository_router() -> Router:
    return Router(
        path="/v2/repository",
        route_handlers=[repository_index, repository_load, repository_unload],
        guards=[repository_guard],
        tags=["model repository"],
        security=[{ADMIN_SECURITY: []}],
    )
