"""REST routes of Triton's trace and logging extensions: ``v2[/models/{m}]/trace/setting`` and
``v2/logging``, GET to read, POST to change (fleet-wide). Typed bodies, documented in the OpenAPI
schema; a POST needs the admin token unless ``CONCH_GATEWAY_REPOSITORY_REQUIRES_ADMIN=false``
(the operator endpoints share that switch). The work is ``gateway.extensions.trace_settings``' and
``shared.fleet.log_settings``'."""

from __future__ import annotations

import logging
from typing import Annotated, Any

import msgspec
from litestar import Request, Router, get, post
from litestar.exceptions import ValidationException
from litestar.params import Body

from gateway.admin.guard import ADMIN_SECURITY
from gateway.admin.routes import validation_error_handler
from gateway.repository.routes import repository_guard
from gateway.runtime.state import GatewayState
from shared.fleet import log_settings
from shared.wire.errors import invalid

_Unset = msgspec.UnsetType
UNSET = msgspec.UNSET


class TraceSettingBody(msgspec.Struct, forbid_unknown_fields=True):
    """Settings to change; null clears a model's setting (the fleet's applies again)."""

    trace_level: list[str] | _Unset | None = UNSET
    trace_rate: str | _Unset | None = UNSET
    trace_count: str | _Unset | None = UNSET
    log_frequency: str | _Unset | None = UNSET
    trace_file: str | _Unset | None = UNSET
    trace_mode: str | _Unset | None = UNSET


class TraceSettingView(msgspec.Struct):
    trace_level: list[str]
    trace_rate: str
    trace_count: str
    log_frequency: str
    trace_mode: str


class LogSettingBody(msgspec.Struct, forbid_unknown_fields=True):
    log_file: str | _Unset | None = UNSET
    log_info: bool | _Unset | None = UNSET
    log_warning: bool | _Unset | None = UNSET
    log_error: bool | _Unset | None = UNSET
    log_verbose_level: int | _Unset | None = UNSET
    log_format: str | _Unset | None = UNSET


def _state(request: Request[Any, Any, Any]) -> GatewayState:
    state: GatewayState = request.app.state.gateway  # app.state is untyped (Any)
    return state


def _given(body: msgspec.Struct | None) -> dict[str, Any]:
    if body is None:
        return {}
    return {
        field: getattr(body, field)
        for field in body.__struct_fields__
        if getattr(body, field) is not UNSET
    }


def _model(request: Request[Any, Any, Any], model: str | None) -> str | None:
    if model is not None and model not in _state(request).table.configs:
        raise invalid(f"Request for unknown model : {model}")
    return model


@get(["/trace/setting", "/models/{model:str}/trace/setting"])
async def get_trace_setting(
    request: Request[Any, Any, Any], model: str | None = None
) -> TraceSettingView:
    found = await _state(request).traces.get(_model(request, model))
    return TraceSettingView(**found)


@post(
    ["/trace/setting", "/models/{model:str}/trace/setting"],
    status_code=200,
    guards=[repository_guard],
    security=[{ADMIN_SECURITY: []}],
)
async def post_trace_setting(
    request: Request[Any, Any, Any],
    model: str | None = None,
    data: Annotated[TraceSettingBody | None, Body()] = None,
) -> TraceSettingView:
    found = await _state(request).traces.update(_model(request, model), _given(data))
    return TraceSettingView(**found)


async def _current(request: Request[Any, Any, Any]) -> log_settings.LogSettings:
    found = await log_settings.read(_state(request).redis)
    return found or log_settings.from_level(logging.getLogger().getEffectiveLevel())


@get("/logging")
async def get_logging(request: Request[Any, Any, Any]) -> log_settings.LogSettings:
    return await _current(request)


@post("/logging", status_code=200, guards=[repository_guard], security=[{ADMIN_SECURITY: []}])
async def post_logging(
    request: Request[Any, Any, Any], data: Annotated[LogSettingBody | None, Body()] = None
) -> log_settings.LogSettings:
    settings = log_settings.updated(await _current(request), _given(data))
    await log_settings.write(_state(request).redis, settings)
    log_settings.apply(settings)
    return settings


def settings_router() -> Router:
    return Router(
        path="/v2",
        route_handlers=[get_trace_setting, post_trace_setting, get_logging, post_logging],
        exception_handlers={ValidationException: validation_error_handler},
        tags=["trace and logging"],
    )
