"""shared/runtime/redis_conn.py's connections override two public methods of redis-py's asyncio
``Connection`` (no private API, so redis-py is not pinned exactly). What would break on another
redis-py release is meaning, not a name: these check that hiredis packs every kind of argument
the services send into the very bytes redis-py's own packer makes, so an upgrade that changes
redis-py's packing fails here rather than on the wire."""

from __future__ import annotations

import pytest
from redis.asyncio.connection import Connection
from redis.exceptions import DataError

from shared.runtime import redis_connections

PAYLOAD = bytes(range(256)) * 40  # larger than redis-py's buffer cutoff (6,000 bytes)

COMMANDS = [
    ("PING",),
    ("CONFIG GET", "maxmemory"),  # a name with a space: split into two arguments
    (b"CLIENT SETNAME", b"conch"),
    ("EVALSHA", "a" * 40, 3, b"{m}:req:1:p1", b"{m}:req:1:p2", "{m}:batch:1", b"\x00h", 30_000),
    ("XADD", b"conch:reply:{gw:1}", "*", b"d", PAYLOAD),
    ("XADD", b"k", "*", b"d", memoryview(PAYLOAD)),
    ("XREADGROUP", "GROUP", "workers", "w", "COUNT", 64, "BLOCK", 1000, "STREAMS", b"s", ">"),
    ("SET", "k", 1.5),
    ("SET", "k", -7),
    ("SET", "k", "ünïcode"),
    ("SET", "k", b""),
]


@pytest.mark.parametrize(
    "command", COMMANDS, ids=[str(c[0]) + str(i) for i, c in enumerate(COMMANDS)]
)
def test_hiredis_packs_what_redis_py_packs(command: tuple[object, ...]) -> None:
    ours, theirs = redis_connections.HiredisPackedConnection(), Connection()
    assert b"".join(ours.pack_command(*command)) == b"".join(
        bytes(chunk) for chunk in theirs.pack_command(*command)
    )


def test_a_pipeline_packs_the_same_bytes() -> None:
    """``pack_commands`` (the admission batch, a worker's replies) is redis-py's own over our
    ``pack_command``."""
    ours, theirs = redis_connections.HiredisPackedConnection(), Connection()
    assert b"".join(ours.pack_commands(COMMANDS)) == b"".join(
        bytes(chunk) for chunk in theirs.pack_commands(COMMANDS)
    )


def test_an_argument_redis_py_refuses_is_refused_the_same_way() -> None:
    for connection in (redis_connections.HiredisPackedConnection(), Connection()):
        with pytest.raises(DataError):
            connection.pack_command("SET", "k", None)


def test_only_public_methods_of_redis_py_are_overridden() -> None:
    overridden = {
        name
        for name in vars(redis_connections._HiredisPacking)
        if callable(getattr(Connection, name, None)) and not name.startswith("__")
    }
    assert overridden == {"pack_command", "send_packed_command"}
    for cls in (
        redis_connections.HiredisPackedConnection,
        redis_connections.HiredisPackedUnixConnection,
        redis_connections.HiredisPackedSSLConnection,
    ):
        assert cls.pack_command is redis_connections._HiredisPacking.pack_command
