"""One long-lived Redis connection pool per process, shared by every task in it.

The pool's connections are redis-py's own classes with two public methods overridden
(``shared.runtime.redis_connections``: commands packed by hiredis, writes bounded by
``asyncio.timeout``), given to the pool through its public ``connection_class`` argument.

Every call has a bound: a socket timeout above the longest blocking read (``block=`` of 1 s at
most), a health check on connections idle for a few seconds, and TCP keepalive. A connection
that went half-open (its peer gone without a FIN, a stalled proxy) times out, is dropped and
replaced on the next call, in seconds rather than after the kernel's two-hour keepalive.
"""

from __future__ import annotations

from typing import Any, Unpack, cast

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterPipeline
from redis.asyncio.connection import (
    Connection,
    ConnectKwargs,
    UnixDomainSocketConnection,
    parse_url,
)
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError

from shared.runtime import redis_cluster
from shared.runtime.redis_connections import PACKED

# Seconds any one Redis reply may take. Above every blocking read's ``block`` (1 s at most) and
# far above any command's own time; a half-open connection is given up after this.
SOCKET_TIMEOUT_S = 5.0
# A pooled connection idle longer than this is PINGed before its next command: longer than an
# idle process's 10 s polls, whose connections would each add a PING's round trip (a wake of the
# process and of Redis) every poll (docs/performance.md, "An idle mesh").
HEALTH_CHECK_INTERVAL_S = 15


class _PoolOptions(ConnectKwargs, total=False):
    """The connection-pool arguments ``_options`` gives: ``parse_url``'s, and these."""

    socket_timeout: float | None
    socket_connect_timeout: float | None
    socket_keepalive: bool
    health_check_interval: float
    retry: Retry
    retry_on_error: list[type[Exception]]
    decode_responses: bool
    client_name: str
    max_connections: int
    timeout: float | None  # BlockingConnectionPool's wait for a free connection


def _options(url: str, **kwargs: Unpack[_PoolOptions]) -> _PoolOptions:
    """Connection-pool arguments: ours, then the URL's (which win, as in ``from_url``), with the
    connection class swapped for its hiredis-packing twin. ``from_url`` itself would replace a
    given class with a plain one for ``unix://`` and ``rediss://`` URLs."""
    options: _PoolOptions = {
        "socket_timeout": SOCKET_TIMEOUT_S,
        "socket_connect_timeout": 5,
        "health_check_interval": HEALTH_CHECK_INTERVAL_S,
        # A pooled connection that died with its server (a Redis restart) is replaced and the
        # command sent again, instead of failing the request that happened to draw it.
        "retry": Retry(ExponentialBackoff(cap=0.2, base=0.01), 2),
        "retry_on_error": [RedisConnectionError],
        "decode_responses": False,  # tensor bytes are never decoded
        **kwargs,
        **parse_url(url),
    }
    base = options.get("connection_class", Connection)
    options["connection_class"] = PACKED[base]
    if base is not UnixDomainSocketConnection:
        options["socket_keepalive"] = True
    return options


def _cluster(
    url: str,
    *,
    max_connections: int,
    name: str,
    retries: int,
    socket_timeout: float = SOCKET_TIMEOUT_S,
) -> aioredis.RedisCluster:
    """A cluster client (``redis+cluster://``) with the same bounds, hiredis packing included:
    the nodes it discovers later are built from ``connection_kwargs``, the startup ones exist."""
    client = redis_cluster.connect(
        url,
        socket_timeout=socket_timeout,
        health_check_interval=HEALTH_CHECK_INTERVAL_S,
        name=name,
        max_connections=max_connections,
        retries=retries,
    )
    base = client.connection_kwargs.get("connection_class", Connection)
    # A cluster's nodes are reached over TCP or TLS, so the class is a Connection's twin.
    packed = cast(type[Connection], PACKED[base])
    client.connection_kwargs["connection_class"] = packed
    for node in client.startup_nodes:
        node.connection_class = packed
    return client


def connect(url: str, *, max_connections: int = 64, name: str = "conch") -> aioredis.Redis:
    """Binary-safe client with a bounded pool (per node, on a cluster)."""
    if redis_cluster.is_cluster(url):
        return _cluster(url, max_connections=max_connections, name=name, retries=3)  # type: ignore[return-value]  # a RedisCluster: the same commands
    pool = aioredis.BlockingConnectionPool(
        **_options(
            url,
            max_connections=max_connections,
            timeout=10,
            client_name=name,
        )
    )
    return aioredis.Redis(connection_pool=pool)


def dedicated(url: str, *, name: str = "conch-blocking", block_ms: int = 0) -> aioredis.Redis:
    """A single-connection client for a blocking read loop, so it never starves the pool.

    It never sends a command again by itself: a consumer-group read whose answer was lost has
    delivered its entries all the same, and the loop must hear of the failure to recover them
    (a retry would read past them). On a cluster: a client of its own whose commands are not
    retried either (redirections are followed: a redirected command did not run).
    ``block_ms``: the longest block its reads ask for, added to the socket timeout (an idle
    read may block longer than any command may take)."""
    timeout = SOCKET_TIMEOUT_S + block_ms / 1000
    if redis_cluster.is_cluster(url):
        return _cluster(url, max_connections=64, name=name, retries=0, socket_timeout=timeout)  # type: ignore[return-value]  # a RedisCluster: the same commands
    pool = aioredis.ConnectionPool(
        **_options(
            url, client_name=name, retry=Retry(ExponentialBackoff(), 0), socket_timeout=timeout
        )
    )
    client = aioredis.Redis(connection_pool=pool, single_connection_client=True)
    client.auto_close_connection_pool = True  # as from_url does: aclose() closes the pool too
    return client


def blocking_pool(url: str, *, name: str, max_connections: int = 64) -> aioredis.Redis:
    """A pool for concurrent blocking reads (one per hash slot), whose commands are never sent
    again by the client, for the reason ``dedicated`` gives."""
    if redis_cluster.is_cluster(url):
        return _cluster(url, max_connections=max_connections, name=name, retries=0)  # type: ignore[return-value]  # a RedisCluster: the same commands
    pool = aioredis.BlockingConnectionPool(
        **_options(
            url,
            client_name=name,
            max_connections=max_connections,
            timeout=10,
            retry=Retry(ExponentialBackoff(), 0),
        )
    )
    client = aioredis.Redis(connection_pool=pool)
    client.auto_close_connection_pool = True
    return client


def sync_client(
    url: str, *, name: str = "conch-sync", single_connection: bool = True
) -> redis.Redis:
    """A synchronous client with the same bounds, for a thread of its own (heartbeats) that
    must keep going while the event loop is blocked. Single-connection (connected now) by
    default; otherwise connected on first use, and its pool's ``make_connection()`` gives a
    caller a connection of its own (``shared.runtime.deferred_replies``)."""
    if redis_cluster.is_cluster(url):
        return redis_cluster.sync_client(url, socket_timeout=SOCKET_TIMEOUT_S, name=name)  # type: ignore[return-value]  # a RedisCluster: the same commands
    options: dict[str, object] = {}
    if not url.startswith("unix:"):
        options["socket_keepalive"] = True
    return redis.Redis.from_url(
        url,
        socket_timeout=SOCKET_TIMEOUT_S,
        socket_connect_timeout=5,
        health_check_interval=HEALTH_CHECK_INTERVAL_S,
        client_name=name,
        single_connection_client=single_connection,
        **options,
    )


async def pubsub(client: aioredis.Redis) -> aioredis.client.PubSub:
    """A pub/sub connection. On a cluster, classic pub/sub messages reach every node, so any
    node will do: one drawn at random (replicas included) spreads the subscribers; the client
    learns the cluster first, which a fresh client's ``pubsub()`` does not do by itself."""
    if isinstance(client, aioredis.RedisCluster):
        await client.initialize()
        return client.pubsub(node=client.get_random_node())
    return client.pubsub()


async def queue_script(pipe: Any, script: AsyncScript, keys: list[Any], args: list[Any]) -> None:
    """Queue a registered script on a pipeline. redis-py refuses EVALSHA in a cluster
    pipeline (it cannot load the script on the right node first), so there the script's
    source goes as EVAL: routed by its keys like any command, never NOSCRIPT after a failover."""
    if isinstance(pipe, ClusterPipeline):
        pipe.execute_command("EVAL", script.script, len(keys), *keys, *args)
    else:
        await script(keys=keys, args=args, client=pipe)
