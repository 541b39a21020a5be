"""Each script of ``shared/lua`` against a real Redis and a real Redis Cluster: the ``server``
fixture is parametrised by both (one private redis-server/valkey and one private 3-master
cluster for the whole session, ``conch.private_redis`` and ``conch.private_redis_cluster``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis

from conch.private_redis import PrivateRedis
from conch.private_redis_cluster import PrivateRedisCluster
from shared.runtime import redis_conn
from tests.mesh import flush_database


@pytest.fixture(scope="session", params=["redis", "cluster"])
def contract_server(request: pytest.FixtureRequest) -> Iterator[str]:
    server = PrivateRedis() if request.param == "redis" else PrivateRedisCluster()
    server.start()
    yield server.url
    server.stop()


@pytest.fixture
async def r(contract_server: str) -> AsyncIterator[aioredis.Redis]:
    """A flushed database on the parametrised server (a cluster client on the cluster)."""
    flush_database(contract_server)
    client = redis_conn.connect(contract_server)
    yield client
    await client.aclose()
