"""The Envoy resources for one state of the mesh: a pure function of settings and live gateways.

Written as Envoy's own JSON (the form its docs use) and parsed into the v3 protos, so that the
config reads like an Envoy config and ``json_format`` rejects any unknown field name outright.
Longer than 300 lines because the whole edge config reads best in one place: the listeners,
route, clusters and endpoints side by side (TLS and its secrets are ``controlplane.edge_tls``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# Imported for their side effect: registering the typed_config types that the JSON names.
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2
from envoy.extensions.access_loggers.stream.v3 import stream_pb2  # noqa: F401
from envoy.extensions.filters.http.router.v3 import router_pb2  # noqa: F401
from envoy.extensions.filters.network.http_connection_manager.v3 import (  # noqa: F401
    http_connection_manager_pb2,
)
from envoy.extensions.retry.host.previous_hosts.v3 import previous_hosts_pb2  # noqa: F401
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2  # noqa: F401
from google.protobuf import json_format
from google.protobuf.message import Message

from controlplane import edge_tls
from controlplane.edge_tls import SECRET, EdgeCertificates
from controlplane.settings import ControlPlaneSettings

LISTENER = "type.googleapis.com/envoy.config.listener.v3.Listener"
ROUTE = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
CLUSTER = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
ENDPOINT = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
# The order in which a change is pushed: secrets first (a rotation), clusters before their
# endpoints, both before the listeners and routes that point at them (make-before-break).
PUSH_ORDER = (SECRET, CLUSTER, ENDPOINT, LISTENER, ROUTE)

LISTENER_NAME = "conch_http"
GRPC_LISTENER_NAME = "conch_grpc"
ROUTE_NAME = "conch_routes"
# KServe v2's one streaming call: it lasts as long as the client keeps it open.
GRPC_STREAM_PATH = "/inference.GRPCInferenceService/ModelStreamInfer"

Resources = dict[str, dict[str, Message]]


@dataclass(frozen=True, order=True)
class Endpoint:
    """A gateway's HTTP server (shared by its processes), or its gRPC one (checked on HTTP)."""

    address: str
    port: int
    # Where Envoy's health check goes instead of ``port`` (0: ``port`` itself).
    health_port: int = 0


_HTTP_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"


def _seconds(value: float) -> str:
    return f"{value:.3f}s"


def _ads() -> dict[str, Any]:
    return {"ads": {}, "resource_api_version": "V3"}


def build(
    settings: ControlPlaneSettings,
    endpoints: Iterable[Endpoint],
    grpc_endpoints: Iterable[Endpoint] = (),
    certificates: EdgeCertificates | None = None,
) -> Resources:
    """Every resource Envoy needs, keyed by type URL and name. With a gRPC listener port, also
    the gRPC listener and the HTTP/2 cluster of ``grpc_endpoints``; with ``certificates``, TLS
    on the listeners and its secrets (``controlplane.edge_tls``)."""
    built: Resources = {
        SECRET: {},
        LISTENER: {LISTENER_NAME: listener(settings)},
        ROUTE: {ROUTE_NAME: route(settings)},
        CLUSTER: {settings.cluster_name: cluster(settings)},
        ENDPOINT: {settings.cluster_name: load_assignment(settings.cluster_name, endpoints)},
    }
    if settings.grpc_listener_port:
        name = settings.grpc_cluster_name
        built[LISTENER][GRPC_LISTENER_NAME] = listener(settings, grpc=True)
        built[CLUSTER][name] = cluster(settings, grpc=True)
        built[ENDPOINT][name] = load_assignment(name, grpc_endpoints)
    if certificates is not None:
        built[SECRET] = dict(edge_tls.secrets(certificates))
        for lis in built[LISTENER].values():
            edge_tls.secure(lis, certificates.mutual)
    return built


def listener(s: ControlPlaneSettings, grpc: bool = False) -> listener_pb2.Listener:
    """The HTTP listener, or (``grpc``) the gRPC one on its own port: the same route config
    serves both (gRPC by its content-type, on either), only the port and stats differ."""
    hcm: dict[str, Any] = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager"
        ".v3.HttpConnectionManager",
        "stat_prefix": "conch_grpc_ingress" if grpc else "conch_ingress",
        "codec_type": "AUTO",
        "rds": {"route_config_name": ROUTE_NAME, "config_source": _ads()},
        "stream_idle_timeout": _seconds(s.stream_idle_timeout_s),
        "generate_request_id": True,
        "preserve_external_request_id": True,
        "http_filters": [
            {
                "name": "envoy.filters.http.router",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
                },
            }
        ],
    }
    if s.access_log:
        hcm["access_log"] = [_access_log()]
    port = s.grpc_listener_port if grpc else s.listener_port
    config = {
        "name": GRPC_LISTENER_NAME if grpc else LISTENER_NAME,
        "address": {"socket_address": {"address": s.listener_host, "port_value": port}},
        # Envoy's default SO_REUSEPORT would let any process of the same user bind the port and
        # take a share of the connections; one socket, shared by Envoy's threads, cannot be.
        "enable_reuse_port": False,
        "filter_chains": [
            {
                "filters": [
                    {"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}
                ]
            }
        ],
    }
    return json_format.ParseDict(config, listener_pb2.Listener())


def _access_log() -> dict[str, Any]:
    fields = {
        "ts": "%START_TIME%",
        "request_id": "%REQ(X-REQUEST-ID)%",
        "method": "%REQ(:METHOD)%",
        "path": "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%",
        "status": "%RESPONSE_CODE%",
        "flags": "%RESPONSE_FLAGS%",
        "duration_ms": "%DURATION%",
        "upstream": "%UPSTREAM_HOST%",
        "attempts": "%UPSTREAM_REQUEST_ATTEMPT_COUNT%",
    }
    return {
        "name": "envoy.access_loggers.stdout",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.access_loggers.stream.v3"
            ".StdoutAccessLog",
            "log_format": {"json_format": fields},
        },
    }


def route(s: ControlPlaneSettings) -> route_pb2.RouteConfiguration:
    retry: dict[str, Any] = {
        "retry_on": s.retry_on,
        "num_retries": s.num_retries,
        # Never retry on the host that just failed; try a few picks to find another.
        "retry_host_predicate": [
            {
                "name": "envoy.retry_host_predicates.previous_hosts",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3"
                    ".PreviousHostsPredicate"
                },
            }
        ],
        "host_selection_retry_max_attempts": 5,
        "retry_back_off": {"base_interval": "0.005s", "max_interval": "0.050s"},
    }
    if s.per_try_timeout_s > 0:
        retry["per_try_timeout"] = _seconds(s.per_try_timeout_s)
    routes: list[dict[str, Any]] = []
    if s.grpc_listener_port:
        # gRPC (HTTP/2, content-type application/grpc[+proto]) to the gateways' gRPC ports. A
        # unary call has the route timeout, as over HTTP; ModelStreamInfer none (a stream lasts
        # as long as its client wants; the stream idle timeout still ends a silent one).
        grpc = [{"name": "content-type", "string_match": {"prefix": "application/grpc"}}]
        for match, timeout in (
            ({"path": GRPC_STREAM_PATH}, 0.0),
            ({"prefix": "/"}, s.route_timeout_s),
        ):
            routes.append(
                {
                    "match": {**match, "headers": grpc},
                    "route": {
                        "cluster": s.grpc_cluster_name,
                        "timeout": _seconds(timeout),
                        "retry_policy": retry,
                    },
                }
            )
    routes.append(
        {
            "match": {"prefix": "/"},
            "route": {
                "cluster": s.cluster_name,
                "timeout": _seconds(s.route_timeout_s),
                "retry_policy": retry,
            },
        }
    )
    config = {
        "name": ROUTE_NAME,
        "virtual_hosts": [{"name": "conch", "domains": ["*"], "routes": routes}],
    }
    return json_format.ParseDict(config, route_pb2.RouteConfiguration())


def cluster(s: ControlPlaneSettings, grpc: bool = False) -> cluster_pb2.Cluster:
    """The gateways' HTTP/1.1 cluster, or (``grpc``) their gRPC ports' HTTP/2 one. Both are
    health-checked with the same HTTP/1.1 readiness probe on the gateways' HTTP port (a gRPC
    endpoint names it as its health-check port): a gateway's readiness covers its gRPC
    server too."""
    thresholds = {
        "priority": "DEFAULT",
        "max_connections": s.max_connections,
        "max_pending_requests": s.max_pending_requests,
        "max_requests": s.max_requests,
        "max_retries": s.max_retries,
    }
    protocol: dict[str, Any] = (
        {"http2_protocol_options": {}} if grpc else {"http_protocol_options": {}}
    )
    config = {
        "name": s.grpc_cluster_name if grpc else s.cluster_name,
        "type": "EDS",
        "eds_cluster_config": {"eds_config": _ads()},
        "connect_timeout": _seconds(s.connect_timeout_s),
        "lb_policy": s.lb_policy,
        "health_checks": [
            {
                "timeout": _seconds(s.health_check_timeout_s),
                "interval": _seconds(s.health_check_interval_s),
                # Without these Envoy checks an idle cluster only once a minute.
                "no_traffic_interval": _seconds(s.health_check_interval_s),
                "no_traffic_healthy_interval": _seconds(s.health_check_interval_s),
                "unhealthy_threshold": s.unhealthy_threshold,
                "healthy_threshold": s.healthy_threshold,
                "http_health_check": {"path": s.health_check_path},
            }
        ],
        # Envoy closes a pooled connection to a gateway before the gateway would (uvicorn's
        # keep-alive timeout, 5 s): otherwise a request sent on a connection the gateway is
        # closing that instant is cut ("connection termination"), and cannot be retried safely.
        "typed_extension_protocol_options": {
            _HTTP_OPTIONS: {
                "@type": f"type.googleapis.com/{_HTTP_OPTIONS}",
                "common_http_protocol_options": {
                    "idle_timeout": _seconds(s.upstream_idle_timeout_s)
                },
                "explicit_http_config": protocol,
            }
        },
        # A gateway that left the registry is gone now, not after it also fails a check.
        "ignore_health_on_host_removal": True,
        "common_lb_config": {
            "healthy_panic_threshold": {"value": s.panic_threshold_percent},
            # Envoy batches host changes for 1 s by default before its workers see them; a
            # gateway that joined or died must count at once.
            "update_merge_window": "0s",
        },
        "circuit_breakers": {"thresholds": [thresholds]},
        # Eject a gateway that refuses or resets connections before the next health check.
        "outlier_detection": {
            "split_external_local_origin_errors": True,
            "consecutive_local_origin_failure": 1,
            "enforcing_consecutive_local_origin_failure": 100,
            "enforcing_consecutive_5xx": 0,
            "enforcing_success_rate": 0,
            "enforcing_local_origin_success_rate": 0,
            "interval": "1s",
            "base_ejection_time": "5s",
            "max_ejection_percent": 50,
        },
    }
    return json_format.ParseDict(config, cluster_pb2.Cluster())


def load_assignment(
    cluster_name: str, endpoints: Iterable[Endpoint]
) -> endpoint_pb2.ClusterLoadAssignment:
    lb_endpoints = []
    for e in sorted(set(endpoints)):
        endpoint: dict[str, Any] = {
            "address": {"socket_address": {"address": e.address, "port_value": e.port}}
        }
        if e.health_port:
            endpoint["health_check_config"] = {"port_value": e.health_port}
        lb_endpoints.append({"endpoint": endpoint})
    config: dict[str, Any] = {"cluster_name": cluster_name, "endpoints": []}
    if lb_endpoints:
        config["endpoints"] = [{"lb_endpoints": lb_endpoints}]
    return json_format.ParseDict(config, endpoint_pb2.ClusterLoadAssignment())


def serialized(resources: Mapping[str, Mapping[str, Message]]) -> dict[str, dict[str, bytes]]:
    """Deterministic bytes per resource, used to tell which types actually changed."""
    return {
        type_url: {name: msg.SerializeToString(deterministic=True) for name, msg in items.items()}
        for type_url, items in resources.items()
    }
