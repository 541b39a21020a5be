"""Starting the private Redis and the private Redis Cluster: what a started one must be.

A private Redis whose chosen port is taken before it binds starts on another one. CI failed once
this way: the Redis-Cluster subset's node was given a free port that another
process took before the node bound it, and the whole subset errored at setup.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import conch.private_redis as private_redis
from conch.ports import free_port
from conch.private_redis import PrivateRedis
from conch.private_redis_cluster import PrivateRedisCluster
from shared.wire.errors import ConchError


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def _first_taken(monkeypatch: pytest.MonkeyPatch, module: object, port: int, times: int) -> None:
    """``module.free_port`` answers ``port`` (held by another socket) ``times`` times first."""
    left = [times]

    def racing_free_port(host: str = "127.0.0.1") -> int:
        if left[0]:
            left[0] -= 1
            return port
        return free_port(host)

    monkeypatch.setattr(module, "free_port", racing_free_port)


def test_private_redis_moves_to_a_new_port_when_its_port_was_taken(
    monkeypatch: pytest.MonkeyPatch, taken_port: int
) -> None:
    _first_taken(monkeypatch, private_redis, taken_port, times=2)
    server = PrivateRedis(unix_socket=False).start()
    try:
        assert server.port != taken_port
        assert redis.Redis.from_url(server.url).ping()
    finally:
        server.stop()


def test_private_redis_keeps_a_port_it_was_given(taken_port: int) -> None:
    server = PrivateRedis(port=taken_port, unix_socket=False)
    with pytest.raises(ConchError, match="Address already in use"):
        server.start()
    assert server.port == taken_port


def test_cluster_node_moves_to_new_ports_when_its_port_was_taken(taken_port: int) -> None:
    # The constructor chose each node's two ports; the third node's client port is taken since.
    cluster = PrivateRedisCluster(masters=3, replicas=0)
    cluster.nodes[2].port = taken_port
    try:
        cluster.start()
        assert taken_port not in {node.port for node in cluster.nodes}
        client = redis.RedisCluster("127.0.0.1", cluster.nodes[0].port)
        for key in ("a", "b", "c", "d"):  # spread over the three masters' slots
            client.set(key, key)
        assert [client.get(key) for key in ("a", "b", "c", "d")] == [b"a", b"b", b"c", b"d"]
    finally:
        cluster.stop()


def test_free_port_does_not_hand_out_a_port_twice_in_a_row_of_choices() -> None:
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)


def test_a_started_cluster_has_every_replica_synced() -> None:
    """A write acknowledged by ``WAIT 1`` at once on every master: before, the replicas were
    still waiting out Redis's 5 s diskless-sync delay, so a master killed early left an empty
    replica, and WAIT ran into its timeout."""
    cluster = PrivateRedisCluster(masters=3, replicas=1).start()
    try:
        for master in cluster.nodes[:3]:
            client = master.client()
            key = next(f"k{i}" for i in range(10_000) if cluster.master_for(f"k{i}") is master)
            client.set(key, "value")
            started = time.monotonic()
            assert client.execute_command("WAIT", 1, 2000) == 1
            assert time.monotonic() - started < 1.0
    finally:
        cluster.stop()


def test_free_port_is_outside_the_range_outgoing_connections_take_theirs_from() -> None:
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    if low < 11_000:
        pytest.skip(f"no room below this machine's ephemeral range {low}-{high}")
    assert all(not low <= free_port() <= high for _ in range(50))
