"""The admin API under ``/v2/admin/``: version weights, shadow traffic, tenants and API keys.

Every route needs the admin token (``Authorization: Bearer <token>``, ``gateway.admin.guard``).
The handlers are thin: the bodies are ``gateway.admin.bodies``, the work is
``gateway.admin.store``'s.
"""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Request, Response, Router, delete, get, put
from litestar.exceptions import ValidationException
from litestar.params import Body

from gateway.admin.bodies import (
    Deleted,
    ShadowView,
    TenantBody,
    TenantList,
    TenantView,
    WeightsBody,
    WeightsView,
)
from gateway.admin.guard import ADMIN_SECURITY, admin_guard
from gateway.admin.store import AdminStore
from gateway.errors import error_response
from gateway.routing.traffic_table import Shadow
from shared.wire.errors import ErrorCode


def validation_error_handler(_: Request[Any, Any, Any], exc: ValidationException) -> Response[Any]:
    """Litestar's body validation as one message naming the field."""
    problems = []
    for item in exc.extra if isinstance(exc.extra, list) else []:
        key = item.get("key", "") if isinstance(item, dict) else ""
        message = item.get("message", "") if isinstance(item, dict) else str(item)
        field = "body" if key in ("", "data") else f"field '{key}'"
        problems.append(f"{field}: {message}")
    detail = "; ".join(problems) or str(exc.detail)
    return error_response(ErrorCode.INVALID_ARG, f"invalid request body: {detail}")


def _store(request: Request[Any, Any, Any]) -> AdminStore:
    store: AdminStore = request.app.state.gateway.admin  # app.state is untyped (Any)
    return store


@get("/models/{model:str}/weights", summary="Version weights of a model")
async def get_weights(request: Request[Any, Any, Any], model: str) -> WeightsView:
    return await _store(request).get_weights(model)


@put("/models/{model:str}/weights", summary="Set version weights (every gateway within 1 s)")
async def put_weights(
    request: Request[Any, Any, Any], model: str, data: Annotated[WeightsBody, Body()]
) -> WeightsView:
    return await _store(request).put_weights(model, data)


@delete(
    "/models/{model:str}/weights",
    status_code=200,
    summary="Clear weights (requests go to the newest version)",
)
async def delete_weights(request: Request[Any, Any, Any], model: str) -> WeightsView:
    return await _store(request).delete_weights(model)


@get("/models/{model:str}/shadow", summary="Shadow traffic setting and counters")
async def get_shadow(request: Request[Any, Any, Any], model: str) -> ShadowView:
    return await _store(request).get_shadow(model)


@put("/models/{model:str}/shadow", summary="Send a percentage of requests to a candidate too")
async def put_shadow(
    request: Request[Any, Any, Any], model: str, data: Annotated[Shadow, Body()]
) -> ShadowView:
    return await _store(request).put_shadow(model, data)


@delete("/models/{model:str}/shadow", status_code=200, summary="Stop shadow traffic")
async def delete_shadow(request: Request[Any, Any, Any], model: str) -> Deleted:
    return await _store(request).delete_shadow(model)


@get("/tenants", summary="Tenant names")
async def list_tenants(request: Request[Any, Any, Any]) -> TenantList:
    return await _store(request).list_tenants()


@get("/tenants/{tenant:str}", summary="A tenant (key ids, limits, priority, models)")
async def get_tenant(request: Request[Any, Any, Any], tenant: str) -> TenantView:
    return await _store(request).get_tenant(tenant)


@put("/tenants/{tenant:str}", summary="Create or replace a tenant")
async def put_tenant(
    request: Request[Any, Any, Any], tenant: str, data: Annotated[TenantBody, Body()]
) -> TenantView:
    return await _store(request).put_tenant(tenant, data)


@delete("/tenants/{tenant:str}", status_code=200, summary="Delete a tenant and revoke its keys")
async def delete_tenant(request: Request[Any, Any, Any], tenant: str) -> Deleted:
    return await _store(request).delete_tenant(tenant)


def admin_router() -> Router:
    return Router(
        path="/v2/admin",
        route_handlers=[
            get_weights,
            put_weights,
            delete_weights,
            get_shadow,
            put_shadow,
            delete_shadow,
            list_tenants,
            get_tenant,
            put_tenant,
            delete_tenant,
        ],
        guards=[admin_guard],
        exception_handlers={ValidationException: validation_error_handler},
        tags=["admin"],
        security=[{ADMIN_SECURITY: []}],
    )
