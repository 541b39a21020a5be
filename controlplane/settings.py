"""Control plane settings, from ``CONCH_CONTROLPLANE_*`` (and ``CONCH_REDIS_URL``).

Everything Envoy is told (listener port, route timeout, retries, health checks) is a setting
here, because Envoy itself is configured only through the control plane: changing the edge means
changing these values and restarting the control plane, never editing Envoy's bootstrap.
"""

from __future__ import annotations

from shared.runtime.settings import Settings


class ControlPlaneSettings(Settings, kw_only=True):
    __prefix__ = "CONCH_CONTROLPLANE_"

    # The ADS (xDS v3) gRPC server that Envoy connects to.
    xds_host: str = "0.0.0.0"
    # Port of that server (Envoy's bootstrap names it).
    xds_port: int = 18000
    # /metrics and /v2/health/{live,ready} of the control plane itself.
    health_host: str = "0.0.0.0"
    # Port of those probes and /metrics.
    health_port: int = 8030

    # Envoy's public listener (inside Envoy's network namespace).
    listener_host: str = "0.0.0.0"
    # Port Envoy serves clients on (conch up --with-envoy: --envoy-port).
    listener_port: int = 8080
    # Port of Envoy's KServe v2 gRPC listener (Triton's gRPC port beside its HTTP one; conch up
    # --with-envoy: --envoy-grpc-port); 0: no gRPC at the edge. When set, both listeners send
    # requests with content-type application/grpc to the gateways' gRPC ports (HTTP/2).
    grpc_listener_port: int = 0
    # TLS at the edge: the PEM certificate chain Envoy presents on its listeners (HTTP and
    # gRPC), sent to Envoy as an SDS secret over ADS (controlplane/edge_tls.py); empty: no TLS.
    edge_tls_cert: str = ""
    # The PEM private key of that certificate.
    edge_tls_key: str = ""
    # PEM of the authority client certificates must chain to (needed for mutual TLS).
    edge_tls_root_cert: str = ""
    # Mutual TLS at the edge: a client without a certificate from EDGE_TLS_ROOT_CERT is refused
    # at the handshake.
    edge_tls_mutual: bool = False
    # How often the three files are looked at; a change (a rotation) reaches Envoy's new
    # connections without a restart.
    edge_tls_poll_s: float = 2.0
    # Whole-request timeout at the edge; 0 disables it. Longer than the gateway's default
    # deadline (30 s) so that the gateway, which knows the request, answers a timeout first.
    route_timeout_s: float = 60.0
    # A retry (connect failure, reset) gets this long per try; 0 means the route timeout.
    per_try_timeout_s: float = 0.0
    # A stream (a request or a streamed answer) with no bytes either way this long is reset.
    stream_idle_timeout_s: float = 300.0
    # Retries only where no gateway can have received the request: the connection failed, the
    # stream was refused, or it was reset before the request went out. A reset after that may
    # come from a gateway that already queued the request; retrying it would run it twice.
    retry_on: str = "connect-failure,refused-stream,reset-before-request"
    # Retries of one request at most (each on another gateway).
    num_retries: int = 2
    # Emit one JSON access-log line per request on Envoy's stdout.
    access_log: bool = True

    # The EDS cluster of gateways.
    cluster_name: str = "conch_gateways"
    # The EDS cluster of the gateways' gRPC ports (HTTP/2), used when grpc_listener_port is set.
    grpc_cluster_name: str = "conch_gateways_grpc"
    # How long Envoy waits for a connection to a gateway to open.
    connect_timeout_s: float = 1.0
    # Shorter than the gateway's HTTP keep-alive timeout (5 s), so Envoy, not the gateway,
    # closes an idle connection: a request is never sent on one being closed.
    upstream_idle_timeout_s: float = 3.0
    # Envoy's load-balancing policy across gateways (LEAST_REQUEST, ROUND_ROBIN, RANDOM...).
    lb_policy: str = "LEAST_REQUEST"
    # The gateways' health check: this path must answer 200 (readiness: every model ready).
    health_check_path: str = "/v2/health/ready"
    # How often each gateway is checked, with traffic or without.
    health_check_interval_s: float = 0.5
    # A health check not answered within this long fails.
    health_check_timeout_s: float = 0.5
    # Failed checks in a row before a gateway is ejected.
    unhealthy_threshold: int = 2
    # Passed checks in a row before an ejected gateway is routed to again.
    healthy_threshold: int = 1
    # Below this share of healthy hosts Envoy routes to all of them ("panic"); 0 disables.
    panic_threshold_percent: float = 50.0
    # Circuit breaker: connections Envoy opens to the gateways at most.
    max_connections: int = 4096
    # Circuit breaker: requests in flight to the gateways at most.
    max_requests: int = 4096
    # Circuit breaker: requests waiting for a connection at most; beyond it Envoy answers 503.
    max_pending_requests: int = 4096
    # Circuit breaker: retries in flight at once across the cluster.
    max_retries: int = 256

    # How often live gateways are re-read from Redis (joins/leaves reach Envoy within ~this).
    poll_interval_s: float = 0.25
    # A gateway whose heartbeat is late by less than this stays routed (a Redis stall longer
    # than the heartbeat TTL must not empty the edge); Envoy's health checks eject a dead one.
    gateway_grace_s: float = 10.0
    # Gateways that register an unspecified address (0.0.0.0, ::) are reached at this one.
    fallback_host: str = "127.0.0.1"
    # How long DNS names registered by gateways are cached before being resolved again.
    dns_ttl_s: float = 5.0
    # A removed cluster stays until every Envoy ACKed routes without it, or at most this long.
    retire_timeout_s: float = 10.0
