"""The standard gRPC health service (``grpc.health.v1.Health``) on the gateway's gRPC port: what
Kubernetes' gRPC probes, load balancers and ``grpc_health_probe`` call.

``Check`` and ``Watch`` for the service ``""`` (the server) and
``inference.GRPCInferenceService`` answer from the same readiness as ``/v2/health/ready`` and
``ServerReady`` (``gateway.runtime.readiness``): ``SERVING`` when ready, ``NOT_SERVING`` when not.
Any other service name: ``Check`` fails with ``NOT_FOUND`` and ``Watch`` sends
``SERVICE_UNKNOWN``, as the health protocol asks. ``Watch`` sends the status at once, then each
change (judged every ``WATCH_EVERY_S``), and ``NOT_SERVING`` when the gateway stops, ending the
stream so that a stopping server is not held open by its watchers. ``health`` is a restricted
category for it, as for Triton's ``Check`` (``gateway.core.restricted``).

The messages are built here from the protocol's definition rather than imported from
``grpcio-health-checking``: its only release the package index offers (1.85.1) is generated for
protobuf 7.35 and refuses the protobuf 6.33 that the project pins (and tritonclient's gRPC
modules need). Five fields and one enum, so a descriptor in code is all it takes.

``python -m gateway.grpc.health`` is the probe for containers (compose's healthcheck): it calls
``Check`` on this gateway's gRPC port, with the health restriction's header if one is set, and
exits 0 on ``SERVING``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from gateway.core import restricted
from gateway.settings import GatewaySettings

if TYPE_CHECKING:
    from gateway.runtime.state import GatewayState

SERVICE = restricted.HEALTH_SERVICE
METHODS = ("Check", "Watch")
# The service names this server answers for: the whole server, and KServe v2's service.
KNOWN = frozenset({"", restricted.INFER_SERVICE})
UNKNOWN, SERVING, NOT_SERVING, SERVICE_UNKNOWN = 0, 1, 2, 3
WATCH_EVERY_S = 1.0


def _messages() -> tuple[Any, Any]:
    """``HealthCheckRequest`` and ``HealthCheckResponse`` of grpc/health/v1/health.proto."""
    proto = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name="grpc/health/v1/health.proto", package="grpc.health.v1", syntax="proto3"
    )
    request = file.message_type.add(name="HealthCheckRequest")
    request.field.add(name="service", number=1, type=proto.TYPE_STRING, label=proto.LABEL_OPTIONAL)
    response = file.message_type.add(name="HealthCheckResponse")
    status = response.enum_type.add(name="ServingStatus")
    for name, number in (
        ("UNKNOWN", UNKNOWN),
        ("SERVING", SERVING),
        ("NOT_SERVING", NOT_SERVING),
        ("SERVICE_UNKNOWN", SERVICE_UNKNOWN),
    ):
        status.value.add(name=name, number=number)
    response.field.add(
        name="status",
        number=1,
        type=proto.TYPE_ENUM,
        type_name=".grpc.health.v1.HealthCheckResponse.ServingStatus",
        label=proto.LABEL_OPTIONAL,
    )
    pool = descriptor_pool.DescriptorPool()  # its own pool: no clash with another definition
    pool.Add(file)
    request_class, response_class = (
        message_factory.GetMessageClass(pool.FindMessageTypeByName("grpc.health.v1." + name))
        for name in ("HealthCheckRequest", "HealthCheckResponse")
    )
    return request_class, response_class


HealthCheckRequest, HealthCheckResponse = _messages()


class HealthService:
    def __init__(self, state: GatewayState):
        self.state = state

    async def _status(self) -> int:
        reason = await self.state.readiness.check(self.state.redis)
        return SERVING if reason is None else NOT_SERVING

    async def check(self, request: Any, context: Any) -> Any:
        if request.service not in KNOWN:
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"unknown service '{request.service}'; this server answers for '' (the server) "
                f"and '{restricted.INFER_SERVICE}'",
            )
        return HealthCheckResponse(status=await self._status())

    async def watch(self, request: Any, context: Any) -> Any:
        stopping = self.state.readiness.stopping
        if request.service not in KNOWN:
            yield HealthCheckResponse(status=SERVICE_UNKNOWN)
            await stopping.wait()
            return
        last = None
        while not stopping.is_set():
            status = await self._status()
            if status != last:
                yield HealthCheckResponse(status=status)
                last = status
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), WATCH_EVERY_S)
        if last != NOT_SERVING:
            yield HealthCheckResponse(status=NOT_SERVING)


def add_to_server(state: GatewayState, server: grpc.aio.Server) -> None:
    service = HealthService(state)
    codec: dict[str, Any] = {
        "request_deserializer": HealthCheckRequest.FromString,
        "response_serializer": HealthCheckResponse.SerializeToString,
    }
    handler = grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Check": grpc.unary_unary_rpc_method_handler(service.check, **codec),
            "Watch": grpc.unary_stream_rpc_method_handler(service.watch, **codec),
        },
    )
    server.add_generic_rpc_handlers((handler,))


def probe(address: str, metadata: list[tuple[str, str]], timeout_s: float = 2.0) -> int:
    """``Check("")`` at ``address``: the status, or UNKNOWN when the call fails."""
    with grpc.insecure_channel(address) as channel:
        check = channel.unary_unary(
            f"/{SERVICE}/Check",
            request_serializer=HealthCheckRequest.SerializeToString,
            response_deserializer=HealthCheckResponse.FromString,
        )
        try:
            reply = check(HealthCheckRequest(), timeout=timeout_s, metadata=tuple(metadata))
            return int(reply.status)
        except grpc.RpcError as exc:
            print(f"unhealthy: {address}: {exc.code()} {exc.details()}", file=sys.stderr)
            return UNKNOWN


def main() -> int:
    """Exit 0 when this gateway's gRPC port answers SERVING (a container's healthcheck)."""
    settings = GatewaySettings.from_env()
    rule = restricted.parse(
        settings.grpc_restricted_protocol, "CONCH_GATEWAY_GRPC_RESTRICTED_PROTOCOL", grpc=True
    ).get(restricted.HEALTH)
    metadata = [] if rule is None else [(rule.header.lower(), rule.value)]
    status = probe(f"127.0.0.1:{settings.grpc_port or 8001}", metadata)
    if status != SERVING and status != UNKNOWN:
        print(f"unhealthy: gRPC health status {status} (2: NOT_SERVING)", file=sys.stderr)
    return 0 if status == SERVING else 1


if __name__ == "__main__":
    sys.exit(main())
