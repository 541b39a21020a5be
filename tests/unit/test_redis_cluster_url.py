"""``redis+cluster://`` URLs, and the scheduler's grouping of request streams by slot."""

from __future__ import annotations

import pytest
from redis.crc import key_slot

from scheduler.reading.slot_reads import by_slot
from shared.runtime import redis_cluster
from shared.wire import keys


def test_a_cluster_url_names_its_nodes_and_credentials() -> None:
    nodes, options = redis_cluster.parse("redis+cluster://u:p%40ss@10.0.0.5:6379,[::1]:7000/")
    assert nodes == [("10.0.0.5", 6379), ("::1", 7000)]
    assert options == {"ssl": False, "username": "u", "password": "p@ss"}
    nodes, options = redis_cluster.parse("rediss+cluster://secret@cfg.example.com:6379")
    assert nodes == [("cfg.example.com", 6379)] and options == {"ssl": True, "password": "secret"}


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("redis+cluster://10.0.0.5", "is not host:port"),
        ("redis+cluster://10.0.0.5:6379,:6380", "is not host:port"),
        ("redis+cluster://10.0.0.5:6379/1", "only database 0"),
        ("redis://10.0.0.5:6379", "not a cluster URL"),
    ],
)
def test_a_bad_cluster_url_says_what_is_wrong(url: str, said: str) -> None:
    with pytest.raises(redis_cluster.ClusterUrlError, match=said):
        redis_cluster.parse(url)


def test_only_the_cluster_schemes_select_the_cluster_client() -> None:
    assert redis_cluster.is_cluster("redis+cluster://h:1")
    assert redis_cluster.is_cluster("REDISS+CLUSTER://h:1")
    assert not redis_cluster.is_cluster("redis://h:1/0")
    assert not redis_cluster.is_cluster("unix:///tmp/redis.sock?db=0")


def test_request_streams_are_read_one_slot_per_call() -> None:
    streams = [
        keys.request_stream(model, version, level).encode()
        for model in ("simple", "mlp", "add_sub")
        for version in (1, 2)
        for level in (1, 2)
    ]
    groups = by_slot(streams)
    assert len(groups) == 3  # one per model: all of a model's versions and levels share a slot
    assert sorted(s for group in groups for s in group) == sorted(streams)
    for group in groups:
        assert len({key_slot(s) for s in group}) == 1
