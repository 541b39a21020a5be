"""The services' Redis clients: every URL form keeps hiredis packing, and the private Redis's
Unix socket and TCP port are the same server."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from conch.private_redis import PrivateRedis
from shared.runtime import redis_conn, redis_connections


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://127.0.0.1:6379/0", redis_connections.HiredisPackedConnection),
        ("unix:///tmp/x/redis.sock?db=3", redis_connections.HiredisPackedUnixConnection),
        ("rediss://cache.example:6380/0", redis_connections.HiredisPackedSSLConnection),
    ],
)
def test_every_url_form_keeps_hiredis_packing(url: str, expected: type) -> None:
    for client in (redis_conn.connect(url), redis_conn.dedicated(url)):
        assert client.connection_pool.connection_class is expected
        kwargs = client.connection_pool.connection_kwargs
        assert kwargs["decode_responses"] is False
        assert ("socket_keepalive" in kwargs) is (
            expected is not redis_connections.HiredisPackedUnixConnection
        )
    assert (
        redis_conn.connect("unix:///tmp/x/redis.sock?db=3").connection_pool.connection_kwargs["db"]
        == 3
    )


async def test_unix_socket_and_tcp_reach_the_same_server(redis_server: PrivateRedis) -> None:
    assert redis_server.url.startswith("unix://")
    over_socket = redis_conn.connect(redis_server.url)
    blocking = redis_conn.dedicated(redis_server.url)
    over_tcp = aioredis.Redis.from_url(redis_server.tcp_url)
    try:
        await over_socket.set("conch:test:redis-conn", b"\x00\xff binary")
        assert await over_tcp.get("conch:test:redis-conn") == b"\x00\xff binary"
        assert await blocking.get("conch:test:redis-conn") == b"\x00\xff binary"
        pipe = over_socket.pipeline(transaction=True)
        pipe.incr("conch:test:redis-conn-n").incr("conch:test:redis-conn-n")
        assert await pipe.execute() == [1, 2]
    finally:
        await over_socket.delete("conch:test:redis-conn", "conch:test:redis-conn-n")
        for client in (over_socket, blocking, over_tcp):
            await client.aclose()


async def test_a_write_is_bounded_around_redis_pys_own_and_keeps_the_timeout(
    redis_server: PrivateRedis,
) -> None:
    """The socket timeout is lifted only while redis-py writes (so that it writes without
    ``asyncio.wait_for``): reads after it are bounded by it again."""
    client = redis_conn.connect(redis_server.url)
    try:
        conn = await client.connection_pool.get_connection()
        try:
            await conn.send_packed_command(conn.pack_command("PING"))
            assert conn.socket_timeout == redis_conn.SOCKET_TIMEOUT_S
            assert await conn.read_response() in (b"PONG", "PONG")
        finally:
            await client.connection_pool.release(conn)
        assert await client.set("conch:test:redis-conn-bound", b"x")
        assert await client.getdel("conch:test:redis-conn-bound") == b"x"
    finally:
        await client.aclose()
