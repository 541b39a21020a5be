"""Gateway settings, from CONCH_GATEWAY_* (and CONCH_REDIS_URL)."""

from __future__ import annotations

from gateway.core import restricted
from shared.fleet.control import check_mode
from shared.runtime.settings import Settings

# Triton's --grpc-infer-response-compression-level values, as gRPC's compression levels.
GRPC_COMPRESSION_LEVELS = {"none": 0, "low": 1, "medium": 2, "high": 3}


class GatewaySettings(Settings, kw_only=True):
    __prefix__ = "CONCH_GATEWAY_"

    # Address the HTTP (and gRPC) listeners bind.
    host: str = "0.0.0.0"
    # The name GET /v2 and gRPC ServerMetadata report ("triton" for clients that check it).
    server_name: str = "conch"
    # KServe v2 HTTP port, shared by every process of the service.
    http_port: int = 8000
    # Processes sharing the HTTP port (each has its own Redis pool and reply reader): a number,
    # or "auto" to follow the CPUs this service may use (shared.runtime.cpu_budget).
    processes: str = "auto"
    # Triton's strict readiness: /v2/health/ready answers 200 only when every model the mesh is
    # expected to serve is ready in this gateway (false: once Redis answers).
    strict_readiness: bool = True
    # A process that fails before it accepts connections is started again with a back-off; after
    # this many failures in a row the service gives up and exits (shared.runtime.exits.EXIT_FINAL).
    start_attempts: int = 5
    # A process started while its siblings are ready waits up to this long for its own model
    # table to hold every model before it accepts connections.
    late_start_wait_s: float = 60.0
    # Address other services (Envoy, the control plane) reach this gateway at.
    advertise_host: str = "127.0.0.1"
    # The unary bound: a unary request nobody bounded (no `timeout` parameter, no tenant
    # timeout) is answered within this, with a timeout error at the latest. Streams are not
    # bounded by it (see stream_silence_timeout_ms).
    default_timeout_ms: int = 30_000
    # A stream (gRPC ModelStreamInfer, SSE, decoupled responses) ends with a timeout error when
    # no response came for this long; nothing bounds its age unless someone asked for it.
    stream_silence_timeout_ms: int = 60_000
    # Admission refuses at once ("no live worker") only when no worker of the version has been
    # ready within this bound; a heartbeat that is merely late queues the request instead.
    gone_bound_ms: int = 30_000
    # Inference requests one gateway process holds at once; more are answered 503 at once.
    # 0: no cap.
    max_in_flight: int = 2_048
    # Largest request body, and largest body after Content-Encoding is undone (413 beyond it);
    # gRPC's message size limits are set to the same figure.
    max_request_bytes: int = 64 * 1024 * 1024
    # How often the gateway renews its registration (the control plane routes to live ones).
    heartbeat_interval_ms: int = 1_000
    # A gateway registration not renewed within this long expires.
    heartbeat_ttl_ms: int = 3_000
    # A worker whose heartbeat is this old is dead (the workers' CONCH_WORKER_DEAD_BOUND_MS):
    # a stream whose frames stopped and whose worker is dead ends with an error. The workers'
    # heartbeat TTL is needed to read their registry.
    dead_bound_ms: int = 10_000
    # The workers' CONCH_WORKER_HEARTBEAT_TTL_MS, which the gateway needs to read their registry.
    worker_heartbeat_ttl_ms: int = 3_000
    # The model table, tenants, traffic and trace settings are re-read from Redis when the
    # change feed announces a change (``shared/fleet/change_feed.py``); this is the safety poll that
    # catches a lost notice.
    refresh_interval_ms: int = 10_000
    # Redis connections one gateway process may hold open at once.
    redis_pool_size: int = 64
    # KServe v2 gRPC port (served by the service's first process); 0 serves no gRPC.
    grpc_port: int = 0
    # HTTPS on the HTTP port (Triton's --grpc-use-ssl, for HTTP): the server certificate and key
    # below must be readable PEM files (gateway.runtime.tls).
    http_use_ssl: bool = False
    # PEM certificate (chain) the HTTP listener presents.
    http_server_cert: str = ""
    # PEM private key of that certificate.
    http_server_key: str = ""
    # PEM of the authority client certificates must chain to (needed for mutual TLS).
    http_root_cert: str = ""
    # Mutual TLS on HTTP: a client without a certificate from HTTP_ROOT_CERT is refused at the
    # handshake; turns HTTP_USE_SSL on.
    http_use_ssl_mutual: bool = False
    # gRPC over TLS (Triton's --grpc-use-ssl): the gRPC certificate and key below are needed.
    grpc_use_ssl: bool = False
    # PEM certificate (chain) the gRPC listener presents (Triton's --grpc-server-cert).
    grpc_server_cert: str = ""
    # PEM private key of that certificate (Triton's --grpc-server-key).
    grpc_server_key: str = ""
    # PEM of the authority client certificates must chain to (Triton's --grpc-root-cert).
    grpc_root_cert: str = ""
    # Mutual TLS on gRPC (Triton's --grpc-use-ssl-mutual); turns GRPC_USE_SSL on.
    grpc_use_ssl_mutual: bool = False
    # The young generation's threshold of the garbage collector, set (with everything alive
    # at start-up frozen) once the process is ready (``shared/runtime/gc_tuning.py``); 0: Python's
    # own.
    gc_young_threshold: int = 20_000
    # Admin API (/v2/admin/...) bearer token; empty: the admin API is off.
    admin_token: str = ""
    # Inference without an API key (as the anonymous tenant when one is defined).
    allow_anonymous: bool = True
    # Whether /v2/repository/... (load, unload, index) needs the admin token too.
    repository_requires_admin: bool = True
    # Triton's --model-control-mode (none, poll or explicit, any case), or Conch's on_demand
    # (docs/many-models.md): the repository API's load and unload are refused with Triton's
    # error unless it is explicit or on_demand. The workers' CONCH_WORKER_MODEL_CONTROL_MODE
    # must match.
    model_control_mode: str = "none"
    # on_demand mode: the longest a request waits for its model's load (its own timeout, if
    # shorter, wins), in seconds.
    cold_start_timeout_s: float = 120.0
    # Triton's --exit-timeout-secs: a stopping gateway process waits at most this long for its
    # requests in flight (and never longer than the unary bound plus 5 s).
    exit_timeout_s: float = 30.0
    # How long a load or unload waits for every worker of the fleet to answer.
    control_timeout_s: float = 120.0
    # Model files one repository load may carry (Triton's file:<path> parameters), in bytes.
    max_upload_bytes: int = 64 * 1024 * 1024
    # Triton's response cache: the cache Redis (its own server, with maxmemory and an allkeys-lru
    # policy); empty: no response cache. conch up --cache-config local,size=N starts one.
    cache_redis_url: str = ""
    # Responses larger than this (bytes, encoded) are not cached.
    cache_max_entry_bytes: int = 16 * 1024 * 1024
    # Triton's --http-header-forward-pattern / --grpc-header-forward-pattern: request headers
    # whose name matches reach the model as string parameters (empty: none).
    http_header_forward_pattern: str = ""
    # The same for gRPC request metadata (Triton's --grpc-header-forward-pattern).
    grpc_header_forward_pattern: str = ""
    # gRPC keepalive, with Triton's flags' defaults (--grpc-keepalive-time etc.), so clients
    # tuned for Triton's server are neither cut off for pinging nor kept waiting: the time (ms)
    # between the server's keepalive pings.
    grpc_keepalive_time_ms: int = 7_200_000
    # gRPC keepalive: how long (ms) the server waits for a ping's answer before it closes.
    grpc_keepalive_timeout_ms: int = 20_000
    # gRPC keepalive: whether pings are allowed on a connection with no call in progress.
    grpc_keepalive_permit_without_calls: bool = False
    # gRPC keepalive: pings a client may send without data before it must send data.
    grpc_http2_max_pings_without_data: int = 2
    # gRPC keepalive: the shortest interval (ms) between client pings without data that the
    # server accepts; a shorter one is a strike.
    grpc_http2_min_recv_ping_interval_without_data_ms: int = 300_000
    # gRPC keepalive: bad pings (strikes) before the server closes the connection.
    grpc_http2_max_ping_strikes: int = 2
    # Triton's --allow-client-shm: clients may register system (and CUDA) shared memory.
    allow_client_shm: bool = False
    # Whose registrations this gateway shares: the gateways of one host (default: hostname).
    shm_host: str = ""
    # Triton's --http-restricted-api: specs CATEGORY[,CATEGORY...]:HEADER=VALUE joined with ';'
    # (e.g. "model-repository,logging:admin-key=s3cret"); a request to a category listed is
    # answered 403 unless it carries the header with the value (gateway/core/restricted.py).
    http_restricted_api: str = ""
    # Triton's --grpc-restricted-protocol, the same for gRPC: the header a client sends is
    # "triton-grpc-protocol-<HEADER>" (Triton's prefix); refused with UNAVAILABLE.
    grpc_restricted_protocol: str = ""
    # Triton's --grpc-infer-response-compression-level: none, low, medium or high; gRPC
    # responses are compressed with an algorithm the client accepts (gzip, deflate).
    grpc_infer_response_compression_level: str = "none"

    def __post_init__(self) -> None:
        """A wrong restriction, compression level, control mode or exit timeout stops the service
        at start, named."""
        restricted.parse(self.http_restricted_api, "CONCH_GATEWAY_HTTP_RESTRICTED_API", grpc=False)
        restricted.parse(
            self.grpc_restricted_protocol, "CONCH_GATEWAY_GRPC_RESTRICTED_PROTOCOL", grpc=True
        )
        if self.grpc_infer_response_compression_level not in GRPC_COMPRESSION_LEVELS:
            raise ValueError(
                "CONCH_GATEWAY_GRPC_INFER_RESPONSE_COMPRESSION_LEVEL is "
                f"'{self.grpc_infer_response_compression_level}'; expected one of "
                f"{', '.join(GRPC_COMPRESSION_LEVELS)}"
            )
        self.model_control_mode = check_mode(
            self.model_control_mode, "CONCH_GATEWAY_MODEL_CONTROL_MODE"
        )
        if self.cold_start_timeout_s <= 0:
            raise ValueError(
                f"CONCH_GATEWAY_COLD_START_TIMEOUT_S is {self.cold_start_timeout_s}; "
                "expected seconds > 0"
            )
        for name in ("default_timeout_ms", "stream_silence_timeout_ms"):
            if getattr(self, name) < 1:
                raise ValueError(
                    f"CONCH_GATEWAY_{name.upper()} is {getattr(self, name)}; expected ms >= 1"
                )
        if self.exit_timeout_s < 0:
            raise ValueError(
                f"CONCH_GATEWAY_EXIT_TIMEOUT_S is {self.exit_timeout_s}; expected seconds >= 0"
            )


def graceful_shutdown_s(settings: GatewaySettings) -> float:
    """How long a stopping gateway process drains (SIGTERM): until its last in-flight request
    is answered, which for a unary request nobody bounded is at most the unary bound away, plus
    a margin for the answer to go out, and never longer than Triton's --exit-timeout-secs
    (``exit_timeout_s``). With an exit timeout at least the unary bound plus 5 s, a rolling
    restart cuts no such request (streams and asked timeouts may run longer)."""
    return min(settings.default_timeout_ms / 1000 + 5.0, settings.exit_timeout_s)
