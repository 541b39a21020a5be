"""Traffic policy across three gateway processes: weights, rate limits, priorities, fleet-wide
model control and the admin API, against real Redis and real processes (issue 3's "done when").
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from conch.private_redis import PrivateRedis
from shared.wire import keys
from tests.mesh import Mesh, flush_database, sync_redis
from tests.policy_mesh import (
    ADMIN_TOKEN,
    Admin,
    Driver,
    make_policy_repository,
    running_policy_mesh,
    simple_body,
    slow_body,
    split,
)
from tests.waiting import eventually_sync

pytestmark = pytest.mark.e2e

# Gateways re-read the policy every 250 ms; "more than one second later" is the contract.
PROPAGATION_S = 1.05


@pytest.fixture(scope="module")
def policy_mesh(
    redis_server: PrivateRedis, model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Mesh]:
    flush_database(redis_server.url)
    repo = make_policy_repository(model_repository, tmp_path_factory.mktemp("policy_repo"))
    with running_policy_mesh(
        redis_server.url, repo, tmp_path_factory.mktemp("policy_logs"), processes=3
    ) as mesh:
        yield mesh


@pytest.fixture(scope="module")
def admin(policy_mesh: Mesh) -> Admin:
    return Admin(policy_mesh.url)


@pytest.fixture(scope="module")
def rclient(redis_server: PrivateRedis) -> Iterator[redis.Redis]:
    client = sync_redis(redis_server.url, decode_responses=True)
    yield client
    client.close()


def unversioned(index: int) -> tuple[str, dict, dict, int]:
    return "/v2/models/simple/infer", simple_body(index % 7), {}, index


def test_three_gateway_processes_share_the_port(policy_mesh: Mesh, rclient: redis.Redis) -> None:
    live = eventually_sync(
        lambda: rclient.zrangebyscore(
            keys.service_registry("gateway"), int(time.time() * 1000), "+inf"
        ),
        lambda found: len(found) == 3,
        10,
        every=0.2,
    )
    assert len(live) == 3, live
    ports = {rclient.hget(keys.service_info("gateway", g), "port") for g in live}
    assert ports == {str(policy_mesh.http_port)}


def test_weights_split_traffic_and_change_at_runtime(admin: Admin, policy_mesh: Mesh) -> None:
    response = admin.weights("simple", {"1": 80, "3": 20})
    assert response.status_code == 200, response.text
    assert response.json()["weights"] == {"1": 80, "3": 20}
    assert admin.call("GET", "/v2/admin/models/simple/weights").json()["weights"] == {
        "1": 80,
        "3": 20,
    }
    time.sleep(PROPAGATION_S)
    driver = Driver(policy_mesh.url)
    answers = asyncio.run(driver.closed_loop(2000, 16, unversioned))
    assert [a for a in answers if a.status != 200] == []
    shares = split(answers)
    assert set(shares) == {"1", "3"}
    assert abs(shares["1"] - 80) <= 3, shares

    assert admin.weights("simple", {"1": 20, "3": 80}).status_code == 200
    time.sleep(PROPAGATION_S)
    answers = asyncio.run(driver.closed_loop(600, 16, unversioned))
    assert [a for a in answers if a.status != 200] == []
    assert abs(split(answers)["3"] - 80) <= 6, split(answers)

    # An explicit version bypasses the weights.
    explicit = asyncio.run(
        driver.closed_loop(
            20, 4, lambda i: ("/v2/models/simple/versions/1/infer", simple_body(), {}, i)
        )
    )
    assert {(a.status, a.version) for a in explicit} == {(200, "1")}


def test_route_key_sticks_to_one_version(admin: Admin, policy_mesh: Mesh) -> None:
    assert admin.weights("simple", {"1": 50, "3": 50}).status_code == 200
    time.sleep(PROPAGATION_S)
    route = lambda i: (  # noqa: E731
        "/v2/models/simple/infer",
        simple_body(),
        {"X-Conch-Route-Key": f"user-{i % 20}"},
        f"user-{i % 20}",
    )
    answers = asyncio.run(Driver(policy_mesh.url).closed_loop(200, 8, route))
    assert all(a.status == 200 for a in answers)
    by_key: dict[str, set[str | None]] = {}
    for answer in answers:
        by_key.setdefault(answer.tag, set()).add(answer.version)
    assert all(len(versions) == 1 for versions in by_key.values()), by_key
    assert {v for versions in by_key.values() for v in versions} == {"1", "3"}


def test_shadow_traffic_is_recorded_and_discarded(admin: Admin, policy_mesh: Mesh) -> None:
    assert admin.weights("simple", {"1": 100}).status_code == 200
    put = admin.call("PUT", "/v2/admin/models/simple/shadow", {"version": 3, "percent": 50})
    assert put.status_code == 200, put.text
    time.sleep(PROPAGATION_S)
    answers = asyncio.run(Driver(policy_mesh.url).closed_loop(200, 8, unversioned))
    assert {(a.status, a.version) for a in answers} == {(200, "1")}
    counters = eventually_sync(
        lambda: admin.call("GET", "/v2/admin/models/simple/shadow").json()["counters"],
        lambda found: found.get("sent", 0) >= 60,
        5,
        every=0.1,
    )
    assert 60 <= counters["sent"] <= 140, counters
    assert counters.get("succeeded", 0) == counters["sent"], counters
    assert admin.call("DELETE", "/v2/admin/models/simple/shadow").status_code == 200


def test_rate_limit_holds_across_gateways(
    admin: Admin, policy_mesh: Mesh, rclient: redis.Redis
) -> None:
    body = {
        "generate_keys": 1,
        "rate_limit": {"requests_per_second": 50, "burst": 10},
        "models": ["simple"],
    }
    put = admin.call("PUT", "/v2/admin/tenants/limited", body)
    assert put.status_code == 200, put.text
    key = put.json()["generated_keys"][0]
    time.sleep(PROPAGATION_S)
    headers = {"Authorization": f"Bearer {key}"}
    request = lambda i: ("/v2/models/simple/infer", simple_body(), headers, i)  # noqa: E731
    seconds, micros = rclient.time()
    started_us = seconds * 1_000_000 + micros
    answers, duration = asyncio.run(Driver(policy_mesh.url).open_loop(200, 3.0, request))
    admitted = [a for a in answers if a.status == 200]
    limited = [a for a in answers if a.status == 429]
    assert len(admitted) + len(limited) == len(answers), {a.status for a in answers}
    assert len(answers) / duration >= 150  # the tenant was driven well over its limit
    # The window on Redis's clock: from before the first request to the bucket's last update.
    window_s = (float(rclient.hget(keys.rate_bucket("limited"), "ts")) - started_us) / 1e6
    rate = (len(admitted) - 10) / window_s
    assert 45 <= rate <= 55, (len(admitted), window_s, duration, len(answers))
    assert all(a.retry_after and int(a.retry_after) >= 1 for a in limited)
    assert "rate limit exceeded for tenant 'limited'" in limited[0].error

    # The tenant may use only 'simple'; unknown keys get 401.
    forbidden = asyncio.run(
        Driver(policy_mesh.url).closed_loop(
            1, 1, lambda i: ("/v2/models/slow/infer", slow_body(1), headers, i)
        )
    )
    assert forbidden[0].status == 403 and "no access to model 'slow'" in forbidden[0].error
    unknown = asyncio.run(
        Driver(policy_mesh.url).closed_loop(
            1,
            1,
            lambda i: ("/v2/models/simple/infer", simple_body(), {"Authorization": "Bearer x"}, i),
        )
    )
    assert unknown[0].status == 401


def test_priority_one_is_served_first_under_saturation(policy_mesh: Mesh) -> None:
    """120 requests at once on a model that serves ~100/s: 80 at priority 2 sent first, then
    40 at priority 1. First come first served would finish every priority-2 request first."""
    driver = Driver(policy_mesh.url)

    async def burst() -> list:
        low = asyncio.ensure_future(
            driver.closed_loop(80, 80, lambda i: ("/v2/models/slow/infer", slow_body(2), {}, 2))
        )
        await asyncio.sleep(0.05)
        high = await driver.closed_loop(
            40, 40, lambda i: ("/v2/models/slow/infer", slow_body(1), {}, 1)
        )
        return [*(await low), *high]

    answers = asyncio.run(burst())
    assert all(a.status == 200 for a in answers), {(a.status, a.error) for a in answers}
    done = sorted(answers, key=lambda a: a.sent_at + a.latency_s)
    high_ranks = [i for i, a in enumerate(done) if a.tag == 1]
    low_ranks = [i for i, a in enumerate(done) if a.tag == 2]
    # Sent later, priority 1 finishes ahead of the priority-2 requests still queued.
    ahead = sum(1 for h in high_ranks for lo in low_ranks if h < lo)
    share = ahead / (len(high_ranks) * len(low_ranks))
    assert share >= 0.5, (share, high_ranks)
    assert sum(high_ranks) / len(high_ranks) < sum(low_ranks) / len(low_ranks)


def test_new_version_loads_under_load_without_a_failed_request(
    admin: Admin, policy_mesh: Mesh
) -> None:
    assert admin.weights("simple", {"1": 50, "3": 50}).status_code == 200
    time.sleep(PROPAGATION_S)
    simple_dir = policy_mesh.repository / "simple"
    shutil.copytree(simple_dir / "1", simple_dir / "2")
    driver = Driver(policy_mesh.url)

    async def traffic_while(action) -> list:
        stop = asyncio.Event()
        answers: list = []

        async def loop() -> None:
            while not stop.is_set():
                answers.extend(await driver.closed_loop(40, 8, unversioned))

        task = asyncio.create_task(loop())
        try:
            await asyncio.to_thread(action)
        finally:
            stop.set()
            await task
        return answers

    def rollout() -> None:
        load = admin.call("POST", "/v2/repository/models/simple/load", {})
        assert load.status_code == 200, load.text
        put = admin.weights("simple", {"1": 0, "2": 50, "3": 50})
        assert put.status_code == 200, put.text
        time.sleep(PROPAGATION_S + 0.3)

    answers = asyncio.run(traffic_while(rollout))
    failed = [(a.status, a.error) for a in answers if a.status != 200]
    assert failed == []
    assert "2" in {a.version for a in answers}

    # A version with weight is not unloaded; one with weight 0 is, under traffic.
    refused = admin.call(
        "POST", "/v2/repository/models/simple/unload", {"parameters": {"versions": [2]}}
    )
    assert refused.status_code == 400
    assert "version 2 has weight 50" in refused.json()["error"]
    assert "set its weight to 0" in refused.json()["error"]
    whole = admin.call("POST", "/v2/repository/models/simple/unload", {})
    assert whole.status_code == 400

    def unload_v1() -> None:
        response = admin.call(
            "POST", "/v2/repository/models/simple/unload", {"parameters": {"versions": [1]}}
        )
        assert response.status_code == 200, response.text

    answers = asyncio.run(traffic_while(unload_v1))
    assert [(a.status, a.error) for a in answers if a.status != 200] == []
    index = admin.call("POST", "/v2/repository/index", {}).json()
    states = {(e["name"], e.get("version")): e["state"] for e in index}
    assert states[("simple", "1")] == "UNAVAILABLE"
    assert states[("simple", "2")] == "READY" and states[("simple", "3")] == "READY"
    assert admin.call("GET", "/v2/admin/models/simple/weights").json()["weights"] == {
        "2": 50,
        "3": 50,
    }


def _policy_state(r: redis.Redis) -> dict[str, object]:
    state: dict[str, object] = {}
    for pattern in ("conch:{tenants}*", "conch:{policy}*"):
        for key in r.scan_iter(match=pattern):
            kind = r.type(key)
            if kind == "hash":
                state[key] = r.hgetall(key)
            elif kind == "set":
                state[key] = r.smembers(key)
            else:
                state[key] = r.get(key)
    return state


def test_bad_admin_input_is_refused_and_leaves_redis_valid(
    admin: Admin, policy_mesh: Mesh, rclient: redis.Redis
) -> None:
    owner = admin.call("PUT", "/v2/admin/tenants/owner", {"api_keys": ["owner-key-0123456789"]})
    assert owner.status_code == 200, owner.text
    before = _policy_state(rclient)
    weights = "/v2/admin/models/simple/weights"
    cases = [
        ("PUT", weights, {"weights": {"2": 1}}, "wrong", 401, "wrong admin token"),
        ("GET", "/v2/admin/tenants", None, "wrong", 401, "wrong admin token"),
        ("PUT", weights, {"weights": {"2": -1}}, None, 400, "weights"),
        ("PUT", weights, {"weights": {"x": 1}}, None, 400, "weights.x"),
        ("PUT", weights, {"weights": {"2": 0, "3": 0}}, None, 400, "must not all be zero"),
        ("PUT", weights, {"weights": {"9": 10}}, None, 400, "version(s) 9 not loaded"),
        ("PUT", weights, {"weightz": {"2": 1}}, None, 400, "weightz"),
        ("PUT", weights, {}, None, 400, "weights"),
        ("PUT", "/v2/admin/models/nope/weights", {"weights": {"1": 1}}, None, 404, "nope"),
        ("PUT", "/v2/admin/tenants/bad name!", {}, None, 400, "tenant name"),
        (
            "PUT",
            "/v2/admin/tenants/t1",
            {"rate_limit": {"requests_per_second": 0, "burst": 1}},
            None,
            400,
            "rate_limit.requests_per_second",
        ),
        ("PUT", "/v2/admin/tenants/t1", {"api_keys": ["short"]}, None, 400, "api_keys[0]"),
        (
            "PUT",
            "/v2/admin/tenants/t1",
            {"api_keys": ["owner-key-0123456789"]},
            None,
            400,
            "already belongs to tenant 'owner'",
        ),
        ("PUT", "/v2/admin/tenants/t1", {"priority": -1}, None, 400, "priority"),
        ("GET", "/v2/admin/tenants/ghost", None, None, 404, "unknown tenant 'ghost'"),
        ("DELETE", "/v2/admin/tenants/ghost", None, None, 404, "unknown tenant 'ghost'"),
        ("PUT", "/v2/admin/models/simple/shadow", {"version": 9, "percent": 5}, None, 400, "9"),
        (
            "PUT",
            "/v2/admin/models/simple/shadow",
            {"version": 2, "percent": 101},
            None,
            400,
            "percent",
        ),
        ("POST", "/v2/repository/models/simple/unload", {}, "wrong", 401, "wrong admin token"),
        ("POST", "/v2/repository/models/ghost/load", {}, None, 400, "ghost"),
    ]
    for method, path, body, token, status, fragment in cases:
        response = admin.call(method, path, body, token=token)
        assert response.status_code == status, (method, path, body, response.text)
        assert fragment in response.json()["error"], (path, response.json())
    no_token = admin.call("GET", "/v2/admin/tenants", token="")
    assert no_token.status_code == 401
    assert "requires the admin token" in no_token.json()["error"]
    assert _policy_state(rclient) == before

    # Revoking a key (deleting its tenant) locks it out on every gateway.
    assert admin.call("DELETE", "/v2/admin/tenants/owner").status_code == 200
    time.sleep(PROPAGATION_S)
    headers = {"Authorization": "Bearer owner-key-0123456789"}
    answers = asyncio.run(
        Driver(policy_mesh.url).closed_loop(
            9, 3, lambda i: ("/v2/models/simple/infer", simple_body(), headers, i)
        )
    )
    assert {a.status for a in answers} == {401}


def test_openapi_schema_documents_the_admin_api(admin: Admin) -> None:
    schema = admin.call("GET", "/schema/openapi.json").json()
    assert "/v2/admin/tenants/{tenant}" in schema["paths"]
    assert "/v2/admin/models/{model}/weights" in schema["paths"]
    put = schema["paths"]["/v2/admin/tenants/{tenant}"]["put"]
    assert "requestBody" in put
    assert "TenantBody" in json.dumps(schema["components"]["schemas"])


def test_cli_sets_and_reads_weights(policy_mesh: Mesh) -> None:
    base = [sys.executable, "-m", "conch", "admin", "--url", policy_mesh.url]
    env_token = ["--token", ADMIN_TOKEN]
    done = subprocess.run(
        [*base, *env_token, "weights", "set", "simple", "2=90", "3=10"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    got = subprocess.run(
        [*base, *env_token, "weights", "get", "simple"], capture_output=True, text=True, check=True
    )
    assert json.loads(got.stdout)["weights"] == {"2": 90, "3": 10}
    bad = subprocess.run(
        [*base, "--token", "nope", "weights", "get", "simple"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 1 and "HTTP 401" in bad.stderr
