"""Who sent a request, as the protocol adapter (REST or gRPC) saw it: the data plane admits and
routes by this, never by protocol headers of its own."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.core.auth import Tenant

# A request header (gRPC: metadata key) whose value pins a caller to one version while the
# weights stand (see ``gateway.routing.version_choice.route_point``).
ROUTE_KEY_HEADER = "x-conch-route-key"


@dataclass(frozen=True)
class Caller:
    """Who sent a request, as the protocol adapter saw it."""

    authorization: str | None = None
    route_key: str | None = None
    # Set for requests the gateway makes itself (shadow traffic): no auth, no rate limit.
    trusted: bool = False
    tenant: Tenant | None = None
    # Set once the key was checked from the headers (``tenant`` is then the caller's, None for
    # anonymous): admission does not look it up again.
    authenticated: bool = False


ANONYMOUS_CALLER = Caller()
