"""KServe v2 over gRPC (``inference.GRPCInferenceService``), a thin adapter over the same data
plane as REST.

One process of a gateway service serves gRPC, on a port bound without ``SO_REUSEPORT``. grpcio
cannot serve a socket bound by another process (HTTP's processes share one that way), and with
``SO_REUSEPORT`` any process of the same user could bind the same port and take a share of the
connections: a second mesh, or this mesh's own HTTP server given the same number. One exclusive
listener makes such a clash fail at once with "address already in use" instead.

Input is bounded as on REST: gRPC's receive and send message limits are the gateway's
``max_request_bytes``, an API key is checked from the metadata before the request message is
read (an interceptor), the in-flight cap applies, and an unexpected error answers INTERNAL with
the request id only."""

from __future__ import annotations

import logging
from typing import Any

import grpc
import msgspec
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc

from gateway.core import restricted
from gateway.core.caller import ROUTE_KEY_HEADER, Caller
from gateway.errors import GRPC_STATUS, REDIS_ERRORS, internal_error, redis_unavailable
from gateway.extensions import stats
from gateway.grpc import health
from gateway.grpc.codec import encode_grpc_response, parse_grpc_request
from gateway.grpc.extensions import RepositoryService, SettingsService, SharedMemoryService
from gateway.grpc.restrictions import RestrictedProtocols
from gateway.grpc.stream import model_stream_infer
from gateway.runtime import tls
from gateway.runtime.state import GatewayState
from gateway.server_identity import server_metadata
from gateway.settings import GRPC_COMPRESSION_LEVELS, GatewaySettings
from shared.runtime.listen import check_free
from shared.wire.errors import ConchError, ErrorCode

log = logging.getLogger(__name__)


class InferenceService(
    SharedMemoryService,
    RepositoryService,
    SettingsService,
    service_pb2_grpc.GRPCInferenceServiceServicer,  # type: ignore[misc]  # tritonclient: no stubs
):
    def __init__(self, state: GatewayState):
        self.state = state
        self._metadata = service_pb2.ServerMetadataResponse(
            **server_metadata(state.settings.server_name)
        )

    async def ServerLive(self, request: Any, context: Any) -> Any:
        return service_pb2.ServerLiveResponse(live=True)

    async def ServerReady(self, request: Any, context: Any) -> Any:
        reason = await self.state.readiness.check(self.state.redis)
        return service_pb2.ServerReadyResponse(ready=reason is None)

    async def ModelReady(self, request: Any, context: Any) -> Any:
        ready = await self.state.table.ready(request.name, request.version or None)
        return service_pb2.ModelReadyResponse(ready=ready)

    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        return self._metadata

    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        metadata = await _guard(
            context, lambda: self.state.table.metadata(request.name, request.version or None)
        )
        return json_format.ParseDict(metadata, service_pb2.ModelMetadataResponse())

    async def ModelConfig(self, request: Any, context: Any) -> Any:
        def config() -> dict[str, Any]:
            if request.version:
                self.state.table.resolve_version(request.name, request.version)
            return self.state.table.config(request.name).to_json()

        message = json_format.ParseDict(
            await _guard(context, config), model_config_pb2.ModelConfig()
        )
        return service_pb2.ModelConfigResponse(config=message)

    async def ModelStatistics(self, request: Any, context: Any) -> Any:
        table = self.state.table

        def wanted() -> dict[str, list[int]]:
            if not request.name:
                return {name: list(table.versions.get(name, {})) for name in table.configs}
            if request.version:
                return {request.name: [table.resolve_version(request.name, request.version)]}
            table.config(request.name)
            return {request.name: list(table.versions.get(request.name, {}))}

        found = await stats.collect(self.state.redis, await _guard(context, wanted))
        return json_format.ParseDict(
            {"model_stats": found},
            service_pb2.ModelStatisticsResponse(),
            ignore_unknown_fields=True,
        )

    async def ModelInfer(self, request: Any, context: Any) -> Any:
        headers = dict(context.invocation_metadata() or ())
        dataplane = self.state.dataplane
        try:
            dataplane.in_flight.enter(request.model_name)
        except ConchError as exc:
            await context.abort(GRPC_STATUS[exc.code], exc.message)
        try:
            parsed = parse_grpc_request(request)
            plan = await dataplane.extensions.prepare(parsed, headers, grpc=True)
            caller = Caller(headers.get("authorization"), headers.get(ROUTE_KEY_HEADER))
            outcome = await dataplane.infer(
                request.model_name,
                request.model_version or None,
                parsed,
                caller,
                endpoint="ModelInfer RPC",
            )
            finished = await dataplane.extensions.finish(
                plan, dataplane.table.configs.get(request.model_name), outcome.reply.outputs
            )
        except ConchError as exc:
            await context.abort(GRPC_STATUS.get(exc.code, grpc.StatusCode.INTERNAL), exc.message)
        except REDIS_ERRORS as exc:
            _, body, _, _ = redis_unavailable(exc, f"grpc infer {request.model_name}")
            await context.abort(grpc.StatusCode.UNAVAILABLE, msgspec.json.decode(body)["error"])
        except Exception as exc:
            _, body, _, _ = internal_error(exc, "grpc ModelInfer")
            await context.abort(grpc.StatusCode.INTERNAL, msgspec.json.decode(body)["error"])
        finally:
            dataplane.in_flight.leave()
        return encode_grpc_response(
            request.model_name,
            outcome.version,
            request.id,
            finished.outputs,
            finished.in_shared_memory,
            outcome.reply.parameters,
        )

    async def ModelStreamInfer(self, request_iterator: Any, context: Any) -> Any:
        """Bidirectional streaming inference (``gateway.grpc.stream``)."""
        async for response in model_stream_infer(self.state.dataplane, request_iterator, context):
            yield response


async def _guard(context: Any, build: Any) -> Any:
    """Run a lookup, answering its ConchError with the matching gRPC status."""
    try:
        return build()
    except ConchError as exc:
        await context.abort(GRPC_STATUS.get(exc.code, grpc.StatusCode.INTERNAL), exc.message)


class KeyBeforeMessage(grpc.aio.ServerInterceptor):
    """An unknown API key is refused from the metadata alone, before the request message (up to
    ``max_request_bytes``) is read and decoded; which models the key may use is checked with
    the message, which names the model."""

    def __init__(self, state: GatewayState):
        self.state = state

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        if details.method.endswith(("/ModelInfer", "/ModelStreamInfer")):
            metadata = dict(details.invocation_metadata or ())
            try:
                self.state.tenants.identify(metadata.get("authorization"))
            except ConchError as exc:
                status, message = GRPC_STATUS[exc.code], exc.message

                async def refuse(request: Any, context: Any) -> Any:
                    await context.abort(status, message)

                if details.method.endswith("/ModelStreamInfer"):
                    return grpc.stream_stream_rpc_method_handler(refuse)
                return grpc.unary_unary_rpc_method_handler(refuse)
        return await continuation(details)


def server_options(settings: GatewaySettings) -> list[tuple[str, int]]:
    """One exclusive listener (no ``SO_REUSEPORT``); messages bounded like REST bodies;
    Triton's keepalive knobs."""
    return [
        ("grpc.so_reuseport", 0),
        ("grpc.max_receive_message_length", settings.max_request_bytes),
        ("grpc.max_send_message_length", settings.max_request_bytes),
        ("grpc.keepalive_time_ms", settings.grpc_keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", settings.grpc_keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", int(settings.grpc_keepalive_permit_without_calls)),
        ("grpc.http2.max_pings_without_data", settings.grpc_http2_max_pings_without_data),
        (
            "grpc.http2.min_recv_ping_interval_without_data_ms",
            settings.grpc_http2_min_recv_ping_interval_without_data_ms,
        ),
        ("grpc.http2.max_ping_strikes", settings.grpc_http2_max_ping_strikes),
        # Triton's --grpc-infer-response-compression-level: gRPC's level, which picks an
        # algorithm the client accepts (for every response of the port, not inference only).
        (
            "grpc.default_compression_level",
            GRPC_COMPRESSION_LEVELS[settings.grpc_infer_response_compression_level],
        ),
    ]


async def start(state: GatewayState, host: str, port: int) -> grpc.aio.Server:
    """Serve gRPC on ``host:port``; raises ``PortInUse`` when the port is taken."""
    restrictions = restricted.parse(
        state.settings.grpc_restricted_protocol, "CONCH_GATEWAY_GRPC_RESTRICTED_PROTOCOL", grpc=True
    )
    server = grpc.aio.server(
        options=server_options(state.settings),
        # Triton's restricted protocols first, then the API key (both apply).
        interceptors=[
            *([RestrictedProtocols(restrictions)] if restrictions else []),
            KeyBeforeMessage(state),
        ],
    )
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(InferenceService(state), server)
    health.add_to_server(state, server)  # grpc.health.v1.Health, the orchestrators' probe
    try:
        credentials = tls.grpc_credentials(state.settings)
        address = f"{host}:{port}"
        if credentials is None:
            bound = server.add_insecure_port(address)
        else:
            bound = server.add_secure_port(address, credentials)
    except RuntimeError:
        bound = 0
    if not bound:
        check_free(host, port, "gRPC", "CONCH_GATEWAY_GRPC_PORT")  # names the holder
        raise ConchError(ErrorCode.UNAVAILABLE, f"cannot listen for gRPC on {host}:{port}")
    await server.start()
    log.info("grpc endpoint listening", extra={"port": bound})
    return server
