"""Redis Cluster URLs and clients: ``redis+cluster://host:port,host:port`` (``rediss+cluster://``
for TLS) in ``CONCH_REDIS_URL`` selects redis-py's cluster client.

The nodes listed are only where discovery starts; the client learns the slot map from any of
them (``CLUSTER SHARDS``), follows MOVED and ASK redirections, and on a connection error or a
CLUSTERDOWN reloads the map, so a failover (a replica promoted) is followed without a restart.
Commands are packed by hiredis as on a single Redis (``shared.runtime.redis_conn``).

A scheme rather than a separate setting: one value names the whole deployment, so every service,
``conch up`` and the tools that read ``CONCH_REDIS_URL`` agree without a second variable.
"""

from __future__ import annotations

from urllib.parse import parse_qs, unquote

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.cluster import ClusterNode as SyncClusterNode
from redis.retry import Retry as SyncRetry

SCHEMES = {"redis+cluster": False, "rediss+cluster": True}


class ClusterUrlError(ValueError):
    """A ``redis+cluster://`` URL that names no usable node."""


def is_cluster(url: str) -> bool:
    return url.partition("://")[0].lower() in SCHEMES


def parse(url: str) -> tuple[list[tuple[str, int]], dict[str, object]]:
    """(startup nodes, client options) of a cluster URL:
    ``redis+cluster://[user:password@]host:port[,host:port...][/][?name=value]``."""
    scheme, _, rest = url.partition("://")
    if scheme.lower() not in SCHEMES:
        raise ClusterUrlError(
            f"'{url}' is not a cluster URL: expected redis+cluster://host:port,..."
        )
    rest, _, query = rest.partition("?")
    rest = rest.rstrip("/")
    if "/" in rest:
        raise ClusterUrlError(
            f"cluster URL '{url}' names a database; Redis Cluster has only database 0"
        )
    options: dict[str, object] = {"ssl": SCHEMES[scheme.lower()]}
    auth, at, hosts = rest.rpartition("@")
    if at:
        user, colon, password = auth.partition(":")
        if colon:
            options["username"] = unquote(user) or None
            options["password"] = unquote(password)
        else:
            options["password"] = unquote(user)
    nodes: list[tuple[str, int]] = []
    for part in hosts.split(","):
        host, colon, port = part.strip().rpartition(":")
        if not colon or not port.isdigit() or not host:
            raise ClusterUrlError(
                f"cluster URL '{url}': node '{part}' is not host:port (e.g. 10.0.0.5:6379)"
            )
        nodes.append((host.strip("[]"), int(port)))
    for name, values in parse_qs(query).items():
        if name in ("ssl_cert_reqs", "ssl_ca_certs"):
            options[name] = values[-1]
    return nodes, options


def connect(
    url: str,
    *,
    socket_timeout: float,
    health_check_interval: float,
    name: str,
    max_connections: int,
    retries: int,
) -> aioredis.RedisCluster:
    """An asyncio cluster client; ``max_connections`` bounds each node's pool."""
    nodes, options = parse(url)
    client = aioredis.RedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in nodes],
        socket_timeout=socket_timeout,
        socket_connect_timeout=5,
        socket_keepalive=True,
        health_check_interval=health_check_interval,
        client_name=name,
        max_connections=max_connections,
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), retries),
        decode_responses=False,
        **options,  # type: ignore[arg-type]  # URL options: str | int | bool
    )
    return client


def sync_client(url: str, *, socket_timeout: float, name: str) -> redis.RedisCluster:
    """A synchronous cluster client (the heartbeat thread)."""
    nodes, options = parse(url)
    return redis.RedisCluster(
        startup_nodes=[SyncClusterNode(host, port) for host, port in nodes],
        socket_timeout=socket_timeout,
        socket_connect_timeout=5,
        socket_keepalive=True,
        client_name=name,
        retry=SyncRetry(ExponentialBackoff(cap=0.5, base=0.05), 3),
        **options,  # type: ignore[arg-type]  # URL options: str | int | bool
    )
