"""The ``conch`` command line: ``conch up``'s options, and the other verbs named for ``--help``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="conch", description="Conch inference-serving mesh")
    sub = parser.add_subparsers(dest="command")
    up_parser = sub.add_parser("up", help="start Redis, gateway, scheduler and workers")
    up_parser.add_argument("--model-repository", required=True, type=Path)
    up_parser.add_argument("--http-port", type=int, default=8000)
    up_parser.add_argument(
        "--grpc-port", type=int, default=8001, help="KServe v2 gRPC port (0: no gRPC)"
    )
    up_parser.add_argument("--host", default="127.0.0.1", help="address the gateway binds")
    up_parser.add_argument("--gateways", type=int, default=2, help="gateway processes")
    up_parser.add_argument("--schedulers", type=int, default=1)
    up_parser.add_argument("--workers-per-backend", type=int, default=1)
    up_parser.add_argument(
        "--with-envoy", action="store_true", help="put Envoy (configured over xDS) in front"
    )
    up_parser.add_argument("--envoy-port", type=int, default=8080)
    up_parser.add_argument("--ready-timeout", type=float, default=180.0)
    up_parser.add_argument("--log-format", choices=["json", "text"], default="json")
    up_parser.add_argument("--log-level", default="INFO")
    up_parser.add_argument(
        "--admin-token",
        default=os.environ.get("CONCH_ADMIN_TOKEN", ""),
        help="admin API token (default: $CONCH_ADMIN_TOKEN, else a generated one, printed)",
    )
    up_parser.add_argument(
        "--allow-anonymous",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="allow inference without an API key",
    )
    up_parser.add_argument(
        "--with-prometheus",
        action="store_true",
        help="also start a local Prometheus (the system's `prometheus`) scraping every service",
    )
    up_parser.add_argument("--prometheus-port", type=int, default=9090)
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
    sub.add_parser("gateway", help="run one gateway service (uvicorn, several processes)")
    sub.add_parser("scheduler", help="run one scheduler service")
    sub.add_parser("worker", help="run one worker service: conch worker --backend NAME")
    sub.add_parser("admin", help="admin API client: conch admin weights|tenants|shadow|models")
    sub.add_parser("controlplane", help="run the xDS control plane for Envoy")
    sub.add_parser("bench", help="benchmark against the shared harness: conch bench --help")
    return parser
