"""Gateway settings, from CONCH_GATEWAY_* (and CONCH_REDIS_URL)."""

from __future__ import annotations

from shared.settings import Settings


class GatewaySettings(Settings, kw_only=True):
    __prefix__ = "CONCH_GATEWAY_"

    host: str = "0.0.0.0"
    http_port: int = 8000
    # Processes sharing the HTTP port; each has its own Redis pool and reply reader.
    processes: int = 2
    # Address other services (Envoy, the control plane) reach this gateway at.
    advertise_host: str = "127.0.0.1"
    # Every request is answered by this deadline at the latest (a `timeout` parameter may lower
    # how long it may wait in the queue, never raise this).
    default_timeout_ms: int = 30_000
    # Admission refuses at once ("no live worker") only when no worker of the version has been
    # ready within this bound; a heartbeat that is merely late queues the request instead.
    gone_bound_ms: int = 30_000
    # Inference requests one gateway process holds at once; more are answered 503 at once.
    # 0: no cap.
    max_in_flight: int = 2_048
    # Largest request body, and largest body after Content-Encoding is undone (413 beyond it);
    # gRPC's message size limits are set to the same figure.
    max_request_bytes: int = 64 * 1024 * 1024
    heartbeat_interval_ms: int = 1_000
    heartbeat_ttl_ms: int = 3_000
    # How often the model table (configs, ready versions) is re-read from Redis.
    refresh_interval_ms: int = 250
    redis_pool_size: int = 64
    # KServe v2 gRPC port shared by the gateway processes; 0 serves no gRPC.
    grpc_port: int = 0
    # Answer POST .../infer straight from ASGI rather than through Litestar's routing.
    infer_fast_path: bool = True
    # Admin API (/v2/admin/...) bearer token; empty: the admin API is off.
    admin_token: str = ""
    # Inference without an API key (as the anonymous tenant when one is defined).
    allow_anonymous: bool = True
    # Whether /v2/repository/... (load, unload, index) needs the admin token too.
    repository_requires_admin: bool = True
    # How long a load or unload waits for every worker of the fleet to answer.
    control_timeout_s: float = 120.0


def graceful_shutdown_s(settings: GatewaySettings) -> float:
    """How long a stopping gateway process drains (SIGTERM): until its last in-flight request
    is answered, which is at most the default deadline away, plus a margin for the answer to
    go out. A rolling restart then cuts no request."""
    return settings.default_timeout_ms / 1000 + 5.0
