"""``conch up --with-envoy``: the xDS control plane, then Envoy in front of the gateways."""

from __future__ import annotations

import argparse
import logging
from typing import TYPE_CHECKING

from conch import http_wait
from conch.supervisor import ServiceSpec, Supervisor

if TYPE_CHECKING:
    from conch.envoy_edge import EdgeTls

log = logging.getLogger(__name__)


def start_edge(
    supervisor: Supervisor, redis_url: str, args: argparse.Namespace, common: dict[str, str]
) -> str:
    """Start the xDS control plane, then Envoy; Envoy learns the gateways from Redis."""
    from conch.envoy_edge import plan_edge  # only `--with-envoy` needs grpcio/xds-protos

    grpc_port = args.envoy_grpc_port if args.grpc_port else 0
    plan = plan_edge(
        redis_url,
        args.envoy_port,
        grpc_port=grpc_port,
        log_level=args.log_level,
        tls=edge_tls(args),
    )
    supervisor.start(
        ServiceSpec("controlplane", plan.controlplane.argv, {**common, **plan.controlplane.env})
    )
    wait_for(plan.controlplane_health_url, 60, supervisor)
    supervisor.start(ServiceSpec("envoy", plan.envoy.argv, plan.envoy.env))
    wait_for(plan.ready_url, 60, supervisor)
    print(f"Envoy (edge) at {plan.public_url} -> gateways at port {args.http_port}", flush=True)
    if plan.grpc_url:
        print(
            f"Envoy (edge) gRPC at {plan.grpc_url} -> gateways at port {args.grpc_port}",
            flush=True,
        )
    return plan.public_url


def edge_tls(args: argparse.Namespace) -> EdgeTls | None:
    """TLS at the edge from ``--envoy-server-cert``, ``--envoy-server-key``, ``--envoy-root-cert``
    and ``--envoy-use-ssl-mutual`` (None without a certificate: Envoy serves in the clear)."""
    cert = getattr(args, "envoy_server_cert", "") or ""
    key = getattr(args, "envoy_server_key", "") or ""
    mutual = bool(getattr(args, "envoy_use_ssl_mutual", False))
    if not (cert or key or mutual):
        return None
    from conch.envoy_edge import EdgeTls

    return EdgeTls(cert, key, getattr(args, "envoy_root_cert", "") or "", mutual)


def wait_for(url: str, timeout_s: float, supervisor: Supervisor) -> None:
    if not http_wait.wait_ok(url, timeout_s, supervisor.check):
        log.error("not ready in time", extra={"url": url})
