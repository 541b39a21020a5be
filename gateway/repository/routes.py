"""The routes of Triton's model repository extension under ``/v2/repository/``: index, load and
unload across the fleet (``gateway.repository.control`` does the work). Typed bodies, documented
in the OpenAPI schema; an empty body is allowed where Triton allows one.

These routes need the admin token unless ``CONCH_GATEWAY_REPOSITORY_REQUIRES_ADMIN=false``.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Request, Response, Router, post
from litestar.connection import ASGIConnection
from litestar.exceptions import ValidationException
from litestar.handlers import BaseRouteHandler
from litestar.params import Body

from gateway.admin.guard import ADMIN_SECURITY, admin_guard
from gateway.admin.routes import validation_error_handler
from gateway.repository.control import RepositoryControl


class IndexBody(msgspec.Struct):
    """``ready``: list only the models (versions) that are ready."""

    ready: bool = False


class IndexEntry(msgspec.Struct, omit_defaults=True):
    name: str
    state: str
    version: str = ""
    reason: str = ""


class LoadBody(msgspec.Struct):
    """``parameters``: ``config`` (Triton's JSON model configuration, as a string) reloads the
    model with it; ``file:<version>/<name>`` (base64) are model files written into the model
    directory before loading."""

    parameters: dict[str, Any] = {}


class UnloadParameters(msgspec.Struct, frozen=True):
    unload_dependents: bool = False
    # Conch: unload only these versions (every loaded version by default).
    versions: list[int] | None = None


class UnloadBody(msgspec.Struct):
    parameters: UnloadParameters = UnloadParameters()


def repository_guard(
    connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler
) -> None:
    if connection.app.state.gateway.settings.repository_requires_admin:
        admin_guard(connection, handler)


def _control(request: Request[Any, Any, Any]) -> RepositoryControl:
    control: RepositoryControl = request.app.state.gateway.repository  # app.state is untyped (Any)
    return control


@post("/index", status_code=200, summary="Models in the repository and their state")
async def repository_index(
    request: Request[Any, Any, Any], data: Annotated[IndexBody | None, Body()] = None
) -> list[IndexEntry]:
    entries = await _control(request).index(data.ready if data else False)
    return [IndexEntry(**entry) for entry in entries]


@post("/models/{model:str}/load", status_code=200, summary="Load a model on every worker")
async def repository_load(
    request: Request[Any, Any, Any], model: str, data: Annotated[LoadBody | None, Body()] = None
) -> Response[Any]:
    await _control(request).load(model, data.parameters if data else {})
    return Response(content=b"", status_code=200)


@post("/models/{model:str}/unload", status_code=200, summary="Unload a model on every worker")
async def repository_unload(
    request: Request[Any, Any, Any], model: str, data: Annotated[UnloadBody | None, Body()] = None
) -> Response[Any]:
    parameters = data.parameters if data else UnloadParameters()
    await _control(request).unload(model, msgspec.structs.asdict(parameters))
    return Response(content=b"", status_code=200)


def repository_router() -> Router:
    return Router(
        path="/v2/repository",
        route_handlers=[repository_index, repository_load, repository_unload],
        guards=[repository_guard],
        exception_handlers={ValidationException: validation_error_handler},
        tags=["model repository"],
        security=[{ADMIN_SECURITY: []}],
    )
