"""Envoy's bootstrap: only where the control plane is, an admin port, and a metrics listener.

Everything else (listener, routes, gateway cluster) comes over ADS, so this file is the same for
every deployment except for the control plane's address. ``deploy/envoy/envoy.yaml`` (compose)
and ``k8s/base/envoy/envoy.yaml`` are this function's output for the host ``controlplane``; a test
keeps them equal to it.
"""

from __future__ import annotations

from typing import Any

XDS_CLUSTER = "conch_xds"
ADMIN_CLUSTER = "envoy_admin"


def render(
    *,
    xds_host: str,
    xds_port: int,
    admin_port: int = 9901,
    admin_host: str = "127.0.0.1",
    metrics_port: int | None = 9902,
    metrics_host: str = "0.0.0.0",
    node_id: str = "conch-edge",
    node_cluster: str = "conch-edge",
) -> dict[str, Any]:
    """The bootstrap as a JSON-able dict (Envoy reads JSON as YAML).

    The admin interface stays on loopback (it can stop Envoy); the metrics listener exposes only
    ``/stats/prometheus`` and ``/ready`` of it, for Prometheus and for readiness probes.
    """
    config: dict[str, Any] = {
        "node": {"id": node_id, "cluster": node_cluster},
        "admin": {"address": _socket(admin_host, admin_port)},
        "dynamic_resources": {
            "ads_config": {
                "api_type": "GRPC",
                "transport_api_version": "V3",
                "set_node_on_first_message_only": True,
                "grpc_services": [{"envoy_grpc": {"cluster_name": XDS_CLUSTER}}],
            },
            "cds_config": {"ads": {}, "resource_api_version": "V3"},
            "lds_config": {"ads": {}, "resource_api_version": "V3"},
        },
        "static_resources": {"clusters": [_xds_cluster(xds_host, xds_port)], "listeners": []},
    }
    if metrics_port is not None:
        config["static_resources"]["clusters"].append(_admin_cluster(admin_host, admin_port))
        config["static_resources"]["listeners"].append(
            _metrics_listener(metrics_host, metrics_port)
        )
    return config


def _socket(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


def _xds_cluster(host: str, port: int) -> dict[str, Any]:
    return {
        "name": XDS_CLUSTER,
        "type": "STRICT_DNS",
        "connect_timeout": "1s",
        "dns_lookup_family": "V4_PREFERRED",
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3"
                ".HttpProtocolOptions",
                "explicit_http_config": {
                    "http2_protocol_options": {
                        "connection_keepalive": {"interval": "30s", "timeout": "5s"}
                    }
                },
            }
        },
        "load_assignment": {
            "cluster_name": XDS_CLUSTER,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _socket(host, port)}}]}],
        },
    }


def _admin_cluster(host: str, port: int) -> dict[str, Any]:
    return {
        "name": ADMIN_CLUSTER,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {
            "cluster_name": ADMIN_CLUSTER,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _socket(host, port)}}]}],
        },
    }


def _metrics_listener(host: str, port: int) -> dict[str, Any]:
    routes = [
        {"match": {"path": path}, "route": {"cluster": ADMIN_CLUSTER}}
        for path in ("/stats/prometheus", "/ready")
    ]
    hcm = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager"
        ".v3.HttpConnectionManager",
        "stat_prefix": "envoy_metrics",
        "route_config": {
            "name": "envoy_metrics",
            "virtual_hosts": [{"name": "envoy_metrics", "domains": ["*"], "routes": routes}],
        },
        "http_filters": [
            {
                "name": "envoy.filters.http.router",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
                },
            }
        ],
    }
    return {
        "name": "envoy_metrics",
        "address": _socket(host, port),
        "enable_reuse_port": False,  # no other process may join the port (shared.runtime.listen)
        "filter_chains": [
            {"filters": [{"name": "envoy.filters.network.http_connection_manager",
                          "typed_config": hcm}]}
        ],
    }  # fmt: skip
