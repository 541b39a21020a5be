"""Environment that `conch up` gives the services it starts, from its own flags."""

from __future__ import annotations

import argparse


def grpc_keepalive_env(args: argparse.Namespace) -> dict[str, str]:
    """Triton's gRPC keepalive flags as the gateway's settings."""
    return {
        "CONCH_GATEWAY_GRPC_KEEPALIVE_TIME_MS": str(args.grpc_keepalive_time),
        "CONCH_GATEWAY_GRPC_KEEPALIVE_TIMEOUT_MS": str(args.grpc_keepalive_timeout),
        "CONCH_GATEWAY_GRPC_KEEPALIVE_PERMIT_WITHOUT_CALLS": str(
            args.grpc_keepalive_permit_without_calls
        ).lower(),
        "CONCH_GATEWAY_GRPC_HTTP2_MAX_PINGS_WITHOUT_DATA": str(
            args.grpc_http2_max_pings_without_data
        ),
        "CONCH_GATEWAY_GRPC_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS": str(
            args.grpc_http2_min_recv_ping_interval_without_data
        ),
        "CONCH_GATEWAY_GRPC_HTTP2_MAX_PING_STRIKES": str(args.grpc_http2_max_ping_strikes),
    }
