"""The ``conch`` command line: ``conch up``'s options, and the other verbs named for ``--help``."""

from __future__ import annotations

import argparse
import os

from conch.triton_flags import (
    add_addresses_and_logs,
    add_boolean,
    add_edge,
    add_model_control,
    add_refused,
    add_tls,
)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="conch", description="Conch inference-serving mesh")
    sub = parser.add_subparsers(dest="command")
    up_parser = sub.add_parser(
        "up",
        help="start Redis, gateway, scheduler and workers",
        epilog="Triton's start-up options are taken in Triton's syntax; the ones Conch does not "
        "implement are refused by name with the reason (docs/coming-from-triton.md).",
    )
    add_model_control(up_parser)
    up_parser.add_argument("--http-port", type=int, default=8000)
    up_parser.add_argument(
        "--grpc-port", type=int, default=8001, help="KServe v2 gRPC port (0: no gRPC)"
    )
    up_parser.add_argument(
        "--host",
        default=None,
        help="address the gateway binds (default 127.0.0.1; Triton's --http-address)",
    )
    up_parser.add_argument(
        "--redis-cluster",
        type=int,
        default=0,
        metavar="MASTERS",
        help="start a private Redis Cluster of MASTERS masters (at least 3), one replica each, "
        "instead of one private Redis (ignored when CONCH_REDIS_URL is set)",
    )
    up_parser.add_argument(
        "--gateways",
        default="auto",
        help="gateway processes: a number, or auto (one per two CPUs, 2 to 8; docs/performance.md)",
    )
    up_parser.add_argument("--schedulers", type=int, default=1)
    up_parser.add_argument(
        "--workers-per-backend",
        default="auto",
        help="worker processes per backend: a number, or auto (one per GPU for a backend with "
        "GPU models, else one)",
    )
    add_boolean(
        up_parser,
        "--strict-readiness",
        default=True,
        help="/v2/health/ready answers 200 only when every model is ready (Triton's default); "
        "false: once the gateway reaches Redis",
    )
    up_parser.add_argument(
        "--start-attempts",
        type=int,
        default=5,
        help="starts of a service that fails before it serves, before conch up gives up",
    )
    up_parser.add_argument(
        "--with-envoy", action="store_true", help="put Envoy (configured over xDS) in front"
    )
    up_parser.add_argument("--envoy-port", type=int, default=8080)
    up_parser.add_argument(
        "--envoy-grpc-port",
        type=int,
        default=8081,
        help="Envoy's KServe v2 gRPC port, to the gateways' --grpc-port (0: no gRPC at the edge)",
    )
    up_parser.add_argument(
        "--ready-timeout",
        type=float,
        default=180.0,
        help="seconds for every model to be ready; then conch up stops with what was missing",
    )
    up_parser.add_argument(
        "--log-format",
        choices=["json", "text", "default", "ISO8601"],
        default="json",
        help="json: one object per line; text (Triton's default and ISO8601): lines for a person",
    )
    up_parser.add_argument("--log-level", default=None, help="DEBUG, INFO (default), WARNING...")
    up_parser.add_argument(
        "--admin-token",
        default=os.environ.get("CONCH_ADMIN_TOKEN", ""),
        help="admin API token (default: $CONCH_ADMIN_TOKEN, else a generated one, printed)",
    )
    add_boolean(
        up_parser,
        "--allow-anonymous",
        default=True,
        negative=True,
        help="allow inference without an API key",
    )
    up_parser.add_argument(
        "--with-prometheus",
        action="store_true",
        help="also start a local Prometheus (the system's `prometheus`) scraping every service",
    )
    up_parser.add_argument("--prometheus-port", type=int, default=9090)
    add_boolean(
        up_parser,
        "--allow-client-shm",
        default=False,
        negative=True,
        help="let clients on this host register system shared memory regions (Triton's "
        "--allow-client-shm)",
    )
    up_parser.add_argument(
        "--cache-config",
        action="append",
        default=[],
        metavar="CACHE,KEY=VALUE",
        help="Triton's response cache for models with response_cache { enable: true }: "
        "'local,size=512M' starts a private cache Redis of that size (LRU eviction), "
        "'redis,host=H,port=P' uses an existing one; shared by every gateway",
    )
    up_parser.add_argument(
        "--http-header-forward-pattern",
        default="",
        help="HTTP request headers whose name matches this regular expression reach the model "
        "as request parameters (Triton's flag; case-insensitive unless it starts with (?-i))",
    )
    up_parser.add_argument(
        "--grpc-header-forward-pattern",
        default="",
        help="the same for gRPC request metadata",
    )
    for flag, default, text in (
        ("--grpc-keepalive-time", 7_200_000, "ms between the server's keepalive pings"),
        ("--grpc-keepalive-timeout", 20_000, "ms the server waits for a ping's answer"),
        ("--grpc-http2-max-pings-without-data", 2, "pings a client may send without data"),
        (
            "--grpc-http2-min-recv-ping-interval-without-data",
            300_000,
            "ms between client pings without data that the server accepts",
        ),
        ("--grpc-http2-max-ping-strikes", 2, "bad pings before the server closes the connection"),
    ):
        up_parser.add_argument(flag, type=int, default=default, help=f"gRPC keepalive: {text}")
    add_boolean(
        up_parser,
        "--grpc-keepalive-permit-without-calls",
        default=False,
        negative=True,
        help="gRPC keepalive: allow pings on connections without calls",
    )
    up_parser.add_argument(
        "--server-name",
        "--id",
        default="conch",
        help="the name server metadata reports (GET /v2, gRPC ServerMetadata); "
        "'triton' for client code that checks it",
    )
    bounds = up_parser.add_argument_group(
        "bounds", "limits that keep the mesh answering under faults and overload"
    )
    bounds.add_argument(
        "--max-request-bytes",
        type=int,
        default=64 * 1024 * 1024,
        help="largest request body, and body once decompressed; gRPC messages too (413 beyond)",
    )
    bounds.add_argument(
        "--max-in-flight",
        type=int,
        default=2048,
        help="inference requests one gateway process holds; more are answered 503 (0: no cap)",
    )
    bounds.add_argument(
        "--dead-bound-ms",
        type=int,
        default=10_000,
        help="a scheduler or worker silent this long is dead: its pending work is taken over",
    )
    bounds.add_argument(
        "--gone-bound-ms",
        type=int,
        default=30_000,
        help="requests are refused at once only when no worker was ready within this",
    )
    bounds.add_argument(
        "--max-deliveries",
        type=int,
        default=3,
        help="an entry delivered more often (its consumers kept dying) is dead-lettered",
    )
    add_tls(up_parser)
    add_edge(up_parser)
    add_addresses_and_logs(up_parser)
    add_refused(up_parser, set(up_parser._option_string_actions))
    sub.add_parser("gateway", help="run one gateway service (uvicorn, several processes)")
    sub.add_parser("scheduler", help="run one scheduler service")
    sub.add_parser("worker", help="run one worker service: conch worker --backend NAME")
    sub.add_parser("admin", help="admin API client: conch admin weights|tenants|shadow|models")
    sub.add_parser("controlplane", help="run the xDS control plane for Envoy")
    sub.add_parser("bench", help="benchmark against the shared harness: conch bench --help")
    return parser
