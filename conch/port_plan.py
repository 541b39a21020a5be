"""The ports ``conch up`` is asked to listen on, checked before anything starts.

Two roles given the same number, or a port another process holds, stop ``conch up`` within a
second with the port, the holder where ``/proc`` tells it, and the flag that changes it. The
services bind their ports exclusively too (``shared.runtime.listen``), so a port taken between this
check and their start fails the same way, a moment later.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from shared.runtime.listen import PortError, check_free


@dataclass(frozen=True)
class PortUse:
    port: int
    what: str  # "HTTP", "gRPC", ...
    flag: str  # the `conch up` flag that sets it
    host: str
    default: int | None = None


def ports_of(args: argparse.Namespace) -> list[PortUse]:
    """Every port the user's flags (or their defaults) ask for."""
    uses = [PortUse(args.http_port, "HTTP", "--http-port", args.host, 8000)]
    if args.grpc_port:
        uses.append(PortUse(args.grpc_port, "gRPC", "--grpc-port", args.host, 8001))
    if args.with_envoy:
        uses.append(PortUse(args.envoy_port, "Envoy", "--envoy-port", "127.0.0.1", 8080))
        if args.grpc_port and args.envoy_grpc_port:
            uses.append(
                PortUse(args.envoy_grpc_port, "Envoy gRPC", "--envoy-grpc-port", "127.0.0.1", 8081)
            )
    if args.with_prometheus:
        uses.append(
            PortUse(args.prometheus_port, "Prometheus", "--prometheus-port", "127.0.0.1", 9090)
        )
    return uses


def clash(uses: list[PortUse]) -> str | None:
    """Why these ports cannot be used (None: they can): a number given to two roles, or a port
    that is taken now."""
    seen: dict[int, PortUse] = {}
    for use in uses:
        other = seen.get(use.port)
        if other is not None:
            defaults = [u.flag for u in (other, use) if u.port == u.default]
            note = f" ({use.port} is the default of {' and '.join(defaults)})" if defaults else ""
            return (
                f"{other.flag} and {use.flag} are both {use.port}{note}: the {other.what} and "
                f"{use.what} servers cannot share a port; give one of them another port with "
                f"{other.flag} or {use.flag}"
            )
        seen[use.port] = use
    for use in uses:
        try:
            check_free(use.host, use.port, use.what, use.flag)
        except PortError as exc:
            return str(exc)
    return None
