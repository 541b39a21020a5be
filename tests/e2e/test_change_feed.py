"""The change feed (``shared/fleet/change_feed.py``) against real processes: a traffic change made
through the admin API reaches every gateway process at once, far inside the safety poll, and a
change whose notice never went out (written straight into Redis) is still applied by the poll.

The gateways here poll every 10 s, so only the notice can explain a change applied within 2 s;
each request below opens its own connection, so the kernel spreads them over both processes
of the gateway service (a process that missed the change would answer about half of them with
the old version).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conch.private_redis import PrivateRedis
from shared.wire import keys
from tests.mesh import Mesh, flush_database, sync_redis
from tests.policy_mesh import (
    Admin,
    make_policy_repository,
    running_policy_mesh,
    simple_body,
)
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e

SAFETY_POLL_MS = 10_000
# Far below the safety poll: only a notice can bring a change this soon.
NOTICE_BOUND_S = 2.0
REQUESTS = 24  # one connection each, over both gateway processes


@pytest.fixture(scope="module")
def feed_mesh(
    redis_server: PrivateRedis, model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Mesh]:
    flush_database(redis_server.url)
    repo = make_policy_repository(model_repository, tmp_path_factory.mktemp("feed_repo"))
    with running_policy_mesh(
        redis_server.url,
        repo,
        tmp_path_factory.mktemp("feed_logs"),
        processes=2,
        CONCH_GATEWAY_REFRESH_INTERVAL_MS=str(SAFETY_POLL_MS),
    ) as mesh:
        yield mesh


def _versions(mesh: Mesh) -> set[str]:
    """The version that answered each of REQUESTS unversioned requests, each on a fresh
    connection (so both gateway processes answer some)."""
    seen: set[str] = set()
    for index in range(REQUESTS):
        with httpx.Client(timeout=30) as client:  # a new connection per request
            response = client.post(
                f"http://{mesh.url}/v2/models/simple/infer", json=simple_body(index % 7)
            )
        assert response.status_code == 200, response.text
        seen.add(str(response.json()["model_version"]))
    return seen


def _applied_within(mesh: Mesh, version: str, bound_s: float) -> float | None:
    """Seconds until every answer comes from ``version``, seen by a look begun within
    ``bound_s`` (None: not)."""
    started = time.monotonic()

    def applied() -> bool:
        return time.monotonic() - started < bound_s and _versions(mesh) == {version}

    try:
        return wait_until(applied, bound_s, every=0.05)
    except TimeoutError:
        return None


def test_admin_weight_changes_reach_every_gateway_process_at_once(feed_mesh: Mesh) -> None:
    admin = Admin(feed_mesh.url)
    # Three changes in a row: a safety poll (every 10 s) cannot explain all three in time.
    for version in ("3", "1", "3"):
        response = admin.weights("simple", {version: 100})
        assert response.status_code == 200, response.text
        took = _applied_within(feed_mesh, version, NOTICE_BOUND_S)
        assert took is not None, f"weights {{{version}: 100}} not applied within {NOTICE_BOUND_S} s"
    admin.call("DELETE", "/v2/admin/models/simple/weights")


def test_a_change_without_a_notice_is_applied_by_the_safety_poll(
    feed_mesh: Mesh, redis_server: PrivateRedis
) -> None:
    admin = Admin(feed_mesh.url)
    assert admin.weights("simple", {"1": 100}).status_code == 200
    assert _applied_within(feed_mesh, "1", NOTICE_BOUND_S) is not None
    # What a lost notice looks like: the state and its revision move, no one is told.
    client = sync_redis(redis_server.url)
    try:
        with client.pipeline(transaction=True) as pipe:
            pipe.hset(keys.weights(), "simple", json.dumps({"3": 100}))
            pipe.incr(keys.policy_rev())
            pipe.execute()
    finally:
        client.close()
    took = _applied_within(feed_mesh, "3", SAFETY_POLL_MS / 1000 + 5)
    assert took is not None, "a change without a notice was never applied (no safety poll?)"
    admin.call("DELETE", "/v2/admin/models/simple/weights")
