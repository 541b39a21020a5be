"""The Litestar application: KServe v2 REST routes over the data plane.

``create_app(settings, process)`` builds one process's app: the Litestar application behind
``gateway.rest.fastpath.FastInferApp``, which answers ``POST .../infer`` itself (the one REST
inference path); ``app_from_env`` reads the settings in each gateway process
(``gateway.runtime.serve``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from litestar import Litestar, Request, Response, get, post
from litestar.connection import ASGIConnection
from litestar.handlers import BaseRouteHandler
from litestar.types import Guard

from gateway.admin.routes import admin_router
from gateway.core import restricted
from gateway.errors import EXCEPTION_HANDLERS
from gateway.extensions import stats
from gateway.extensions.settings_routes import settings_router
from gateway.extensions.shared_memory_routes import shared_memory_router
from gateway.grpc import service as grpc_service
from gateway.openai.routes import openai_router
from gateway.repository.routes import repository_router
from gateway.rest.fastpath import FastInferApp
from gateway.rest.openapi import openapi_config
from gateway.rest.stream_routes import generate, generate_stream, infer_events
from gateway.runtime.state import GatewayState
from gateway.runtime.status import GatewayProcess
from gateway.server_identity import SERVER_VERSION, server_metadata
from gateway.settings import GatewaySettings, graceful_shutdown_s
from shared import metrics
from shared.runtime import gc_tuning, logs, tracing
from shared.wire.errors import ConchError, ErrorCode

log = logging.getLogger(__name__)
_json = msgspec.json.Encoder()


def _state(request: Request[Any, Any, Any]) -> GatewayState:
    state: GatewayState = request.app.state.gateway  # app.state is untyped (Any)
    return state


def _json_response(body: Any, status: int = 200) -> Response[Any]:
    return Response(content=_json.encode(body), status_code=status, media_type="application/json")


@get("/v2")
async def server_metadata_route(request: Request[Any, Any, Any]) -> Response[Any]:
    return _json_response(server_metadata(_state(request).settings.server_name))


@get("/metrics", include_in_schema=False)
async def prometheus_metrics() -> Response[Any]:
    """Prometheus text format, summed over every process of this gateway (multiprocess mode)."""
    return Response(content=metrics.exposition(), media_type=metrics.CONTENT_TYPE_LATEST)


@get("/v2/health/live")
async def health_live() -> Response[Any]:
    return Response(content=b"", status_code=200)


@get("/v2/health/ready")
async def health_ready(request: Request[Any, Any, Any]) -> Response[Any]:
    """Triton's strict readiness (``gateway.runtime.readiness``); a 503 says what it waits for."""
    state = _state(request)
    reason = await state.readiness.check(state.redis)
    if reason is None:
        return Response(content=b"", status_code=200)
    return _json_response({"error": reason}, status=503)


@get(["/v2/models/{model:str}", "/v2/models/{model:str}/versions/{version:str}"])
async def model_metadata(
    request: Request[Any, Any, Any], model: str, version: str | None = None
) -> Response[Any]:
    return _json_response(_state(request).table.metadata(model, version))


@get(["/v2/models/{model:str}/ready", "/v2/models/{model:str}/versions/{version:str}/ready"])
async def model_ready(
    request: Request[Any, Any, Any], model: str, version: str | None = None
) -> Response[Any]:
    ready = await _state(request).table.ready(model, version)
    return Response(content=b"", status_code=200 if ready else 400)


@get(["/v2/models/{model:str}/config", "/v2/models/{model:str}/versions/{version:str}/config"])
async def model_config(
    request: Request[Any, Any, Any], model: str, version: str | None = None
) -> Response[Any]:
    state = _state(request)
    config = state.table.config(model)
    if version is not None:
        state.table.resolve_version(model, version)
    return _json_response(config.to_json())


@get(
    [
        "/v2/models/stats",
        "/v2/models/{model:str}/stats",
        "/v2/models/{model:str}/versions/{version:str}/stats",
    ]
)
async def model_statistics(
    request: Request[Any, Any, Any], model: str | None = None, version: str | None = None
) -> Response[Any]:
    table = _state(request).table
    if model is None:
        wanted = {name: list(table.versions.get(name, {})) for name in table.configs}
    elif version is not None:
        wanted = {model: [table.resolve_version(model, version)]}
    else:
        table.config(model)
        wanted = {model: list(table.versions.get(model, {}))}
    return _json_response({"model_stats": await stats.collect(_state(request).redis, wanted)})


@post(
    ["/v2/models/{model:str}/infer", "/v2/models/{model:str}/versions/{version:str}/infer"],
    status_code=200,
)
async def infer_stream(
    request: Request[Any, Any, Any], model: str, version: str | None = None
) -> Response[Any]:
    """``/infer`` asking for an event stream (``Accept: text/event-stream``): every other
    inference is answered in front of Litestar (``gateway.rest.fastpath``), which sends only these
    here."""
    return await infer_events(request, model, version)


def restriction_guard(restrictions: restricted.Restrictions) -> Guard:
    """Triton's restricted APIs for every Litestar route (the fast path checks ``/infer``
    itself): the route's category from its path template, a 403 without the header's value."""

    def guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        category = restricted.REST_CATEGORY.get(connection.scope.get("path_template", ""))
        refusal = restrictions.refusal(category, connection.headers)
        if refusal is not None:
            raise ConchError(ErrorCode.PERMISSION_DENIED, refusal)

    return guard


def create_app(settings: GatewaySettings, process: GatewayProcess | None = None) -> FastInferApp:
    """One process's app; ``process`` places it in a service of several (None: on its own)."""
    restrictions = restricted.parse(
        settings.http_restricted_api, "CONCH_GATEWAY_HTTP_RESTRICTED_API", grpc=False
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        state = GatewayState(settings, process)
        app.state.gateway = state
        await state.start()
        await state.readiness.wait_to_accept(settings.late_start_wait_s)
        grpc_server = None
        if settings.grpc_port and (process is None or process.serves_grpc):
            grpc_server = await grpc_service.start(state, settings.host, settings.grpc_port)
        gc_tuning.settle(settings.gc_young_threshold)
        state.readiness.start_accepting()
        log.info("gateway process ready", extra={"gateway": state.id, "port": settings.http_port})
        try:
            yield
        finally:
            state.readiness.stop_accepting()
            if grpc_server is not None:  # in-flight calls are answered first
                await grpc_server.stop(grace=graceful_shutdown_s(settings))
            await state.stop()

    app = Litestar(
        route_handlers=[
            server_metadata_route,
            prometheus_metrics,
            health_live,
            health_ready,
            model_metadata,
            model_ready,
            model_config,
            model_statistics,
            infer_stream,
            generate,
            generate_stream,
            admin_router(),
            repository_router(),
            shared_memory_router(),
            settings_router(),
            openai_router(),
        ],
        lifespan=[lifespan],
        guards=[restriction_guard(restrictions)] if restrictions else None,
        exception_handlers=EXCEPTION_HANDLERS,
        request_max_body_size=settings.max_request_bytes,
        openapi_config=openapi_config(SERVER_VERSION),
        logging_config=None,
    )
    return FastInferApp(app, restrictions)


def app_from_env(process: GatewayProcess | None = None) -> FastInferApp:
    """Settings are read here, in each gateway process, not at import."""
    settings = GatewaySettings.from_env()
    logs.setup("gateway", settings.log_level, settings.log_format)
    tracing.setup("gateway")
    return create_app(settings, process)


__all__ = ["app_from_env", "create_app"]
