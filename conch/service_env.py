"""Environment that `conch up` gives the services it starts, from its own flags."""

from __future__ import annotations

import argparse
import os
import ssl
from pathlib import Path

from conch import http_wait
from shared.model_config import python_based


def gateway_env(args: argparse.Namespace, admin_token: str, cache_url: str) -> dict[str, str]:
    """Every gateway setting that a `conch up` flag sets."""
    return {
        "CONCH_GATEWAY_DEAD_BOUND_MS": str(args.dead_bound_ms),
        "CONCH_GATEWAY_HOST": args.host,
        "CONCH_GATEWAY_HTTP_PORT": str(args.http_port),
        "CONCH_GATEWAY_PROCESSES": str(args.gateways),
        "CONCH_GATEWAY_GRPC_PORT": str(args.grpc_port),
        "CONCH_GATEWAY_ADMIN_TOKEN": admin_token,
        "CONCH_GATEWAY_ALLOW_ANONYMOUS": _flag(args.allow_anonymous),
        "CONCH_GATEWAY_STRICT_READINESS": _flag(args.strict_readiness),
        "CONCH_GATEWAY_START_ATTEMPTS": str(args.start_attempts),
        "CONCH_GATEWAY_SERVER_NAME": args.server_name,
        "CONCH_GATEWAY_ALLOW_CLIENT_SHM": _flag(args.allow_client_shm),
        "CONCH_GATEWAY_CACHE_REDIS_URL": cache_url,
        "CONCH_GATEWAY_HTTP_HEADER_FORWARD_PATTERN": args.http_header_forward_pattern,
        "CONCH_GATEWAY_GRPC_HEADER_FORWARD_PATTERN": args.grpc_header_forward_pattern,
        "CONCH_GATEWAY_MAX_REQUEST_BYTES": str(args.max_request_bytes),
        "CONCH_GATEWAY_MAX_IN_FLIGHT": str(args.max_in_flight),
        "CONCH_GATEWAY_GONE_BOUND_MS": str(args.gone_bound_ms),
        **grpc_keepalive_env(args),
        **gateway_control_env(args),
        **gateway_tls_env(args),
        **gateway_edge_env(args),
    }


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


def _flag(value: bool) -> str:
    return "true" if value else "false"


def gateway_control_env(args: argparse.Namespace) -> dict[str, str]:
    """Model control and the drain bound, as the gateway's settings."""
    return {
        "CONCH_GATEWAY_MODEL_CONTROL_MODE": args.model_control_mode,
        "CONCH_GATEWAY_EXIT_TIMEOUT_S": str(float(args.exit_timeout_secs)),
    }


def scheduler_control_env(args: argparse.Namespace) -> dict[str, str]:
    """Model control as the schedulers' settings: in on_demand mode one of them places models."""
    return {
        "CONCH_SCHEDULER_MODEL_CONTROL_MODE": args.model_control_mode,
        "CONCH_SCHEDULER_MODEL_IDLE_UNLOAD_S": str(float(args.model_idle_unload_seconds)),
        "CONCH_SCHEDULER_MODEL_MIN_COPIES": str(args.model_min_copies),
    }


def gateway_tls_env(args: argparse.Namespace) -> dict[str, str]:
    """TLS on the gateway's HTTP and gRPC ports (Triton's --grpc-use-ssl and the HTTP side)."""
    env: dict[str, str] = {}
    for proto in ("http", "grpc"):
        prefix = f"CONCH_GATEWAY_{proto.upper()}_"
        env[prefix + "USE_SSL"] = _flag(getattr(args, f"{proto}_use_ssl"))
        env[prefix + "USE_SSL_MUTUAL"] = _flag(getattr(args, f"{proto}_use_ssl_mutual"))
        for part in ("server_cert", "server_key", "root_cert"):
            path = getattr(args, f"{proto}_{part}")
            env[prefix + part.upper()] = os.path.abspath(path) if path else ""
    return env


def gateway_edge_env(args: argparse.Namespace) -> dict[str, str]:
    """Restricted APIs (several Triton specs joined with ';') and gRPC response compression."""
    return {
        "CONCH_GATEWAY_HTTP_RESTRICTED_API": ";".join(args.http_restricted_api),
        "CONCH_GATEWAY_GRPC_RESTRICTED_PROTOCOL": ";".join(args.grpc_restricted_protocol),
        "CONCH_GATEWAY_GRPC_INFER_RESPONSE_COMPRESSION_LEVEL": (
            args.grpc_infer_response_compression_level
        ),
    }


def _location(location: str) -> str:
    """A --model-repository as the workers read it: a local path made absolute, s3:// kept."""
    return location if location.startswith("s3://") else str(Path(location).expanduser().resolve())


def worker_env(args: argparse.Namespace, cache_dir: Path | None = None) -> dict[str, str]:
    """The repositories, model control and the drain bound, as every worker's settings."""
    env = {
        "CONCH_WORKER_MODEL_REPOSITORY": ",".join(_location(r) for r in args.model_repository),
        "CONCH_WORKER_MODEL_CONTROL_MODE": args.model_control_mode,
        "CONCH_WORKER_LOAD_MODELS": ",".join(args.load_model),
        "CONCH_WORKER_REPOSITORY_POLL_SECS": str(float(args.repository_poll_secs)),
        "CONCH_WORKER_MODEL_CONFIG_NAME": args.model_config_name,
        "CONCH_WORKER_STRICT_MODEL_CONFIG": _flag(args.strict_model_config),
        "CONCH_WORKER_DRAIN_TIMEOUT_S": str(float(args.exit_timeout_secs)),
        "CONCH_WORKER_RATE_LIMIT": args.rate_limit,
        "CONCH_WORKER_RATE_LIMIT_RESOURCES": ",".join(args.rate_limit_resource),
        "CONCH_WORKER_MODEL_MEMORY_BUDGET": args.model_memory_budget,
    }
    if getattr(args, "backend_directory", ""):  # else the worker's default directories
        env["CONCH_WORKER_BACKEND_DIRECTORY"] = ":".join(
            str(d.resolve()) for d in python_based.parse_directories(args.backend_directory)
        )
    if cache_dir is not None:
        env["CONCH_WORKER_REPOSITORY_CACHE_DIR"] = str(cache_dir)
    return env


def gateway_probe_tls(args: argparse.Namespace) -> ssl.SSLContext | None:
    """How conch up probes its gateway over HTTPS (None: plain HTTP): trusting the gateway's
    own certificate and --http-root-cert; under mutual TLS presenting that certificate."""
    if not args.http_use_ssl:
        return None
    client = (args.http_server_cert, args.http_server_key) if args.http_use_ssl_mutual else None
    return http_wait.tls_context(args.http_server_cert, args.http_root_cert, client)
