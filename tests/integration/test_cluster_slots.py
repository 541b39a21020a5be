"""Every script, MULTI and multi-key command the mesh sends keeps its keys in one hash slot.

A real mesh runs a representative workload (inference, sequences, the admin API, shadow and
weights, tenants and rate limits, model control, log and trace settings, a worker killed and its
work reclaimed) on a single Redis under MONITOR; ``tests.redis_slots`` finds the keys of each call
with the server's own ``COMMAND GETKEYS`` and reports any call whose keys hash apart: on Redis
Cluster it would fail with CROSSSLOT. ``pytest --check-redis-slots`` applies the same check to
the commands of a whole test run.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import redis
import tritonclient.http as httpclient

from conch.private_redis import PrivateRedis
from tests.mesh import Mesh
from tests.policy_mesh import ADMIN_TOKEN, Admin
from tests.redis_slots import KeyFinder, Recorder, violations
from tests.waiting import eventually_sync

pytestmark = pytest.mark.e2e


def test_the_check_finds_keys_that_hash_apart(redis_server: PrivateRedis) -> None:
    """The check itself: a cross-slot MULTI, script and XREADGROUP are reported, one-tag ones
    (and the commands of a script, however many) are not."""
    client = redis.Redis.from_url(redis_server.url)
    try:
        finder = KeyFinder(client)
        records = [
            ("127.0.0.1:1", ["MULTI"]),
            ("127.0.0.1:1", ["HSET", "conch:{policy}:weights", "m", "x"]),
            ("127.0.0.1:1", ["SREM", "conch:m:{m}:versions", "1"]),
            ("127.0.0.1:1", ["EXEC"]),
            ("127.0.0.1:2", ["EVALSHA", "abc", "2", "conch:m:{a}:x", "conch:m:{a}:y", "1"]),
            ("lua", ["XADD", "conch:m:{a}:x", "*", "f", "v"]),
            ("lua", ["HINCRBY", "conch:m:{a}:y", "f", "1"]),
            ("127.0.0.1:3", ["EVAL", "return 1", "2", "conch:m:{a}:x", "conch:m:{b}:x"]),
            ("lua", ["GET", "conch:m:{a}:x"]),
            ("lua", ["GET", "conch:m:{c}:x"]),
            (
                "127.0.0.1:4",
                ["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s:{a}", "s:{b}", ">", ">"],
            ),
            ("127.0.0.1:5", ["MULTI"]),
            ("127.0.0.1:5", ["GET", "conch:{fleet}:models:rev"]),
            ("127.0.0.1:5", ["HGETALL", "conch:{fleet}:models"]),
            ("127.0.0.1:5", ["EXEC"]),
        ]
        found = violations(records, finder)
    finally:
        client.close()
    assert len(found) == 4, found
    assert found[0].startswith("multi") and "conch:{policy}:weights" in found[0]
    assert found[1].startswith("script ['EVAL'") and "conch:m:{b}:x" in found[1]
    assert found[2].startswith("script ['<script>']") and "conch:m:{c}:x" in found[2]
    assert found[3].startswith("command ['XREADGROUP'") and "s:{b}" in found[3]


@pytest.fixture(scope="module")
def recorded(
    model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Mesh, Recorder]]:
    server = PrivateRedis(unix_socket=False).start()
    path = tmp_path_factory.mktemp("slots") / "monitor.jsonl"
    mesh = Mesh(server.url, model_repository, log_dir=tmp_path_factory.mktemp("slot_logs"))
    mesh.env_overrides = {
        "CONCH_SCHEDULER_DEAD_BOUND_MS": "2000",
        # the read plan of a cluster (one XREADGROUP per slot), as a cluster would force it
        "CONCH_SCHEDULER_READ_BY_SLOT": "1",
        "CONCH_WORKER_DEAD_BOUND_MS": "2000",
    }
    try:
        with Recorder(server.host, server.port, path) as recorder:
            mesh.start_scheduler()
            mesh.start_worker()
            mesh.start_gateway(processes=2, CONCH_GATEWAY_ADMIN_TOKEN=ADMIN_TOKEN)
            mesh.wait_ready(["simple", "mlp", "simple_sequence", "custom_identity_int32"])
            _workload(mesh)
            yield mesh, recorder
    finally:
        mesh.stop()
        server.stop()


def _infer(client: httpclient.InferenceServerClient, model: str = "simple", **kw: object) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "INT32"),
        httpclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    result = client.infer(model, inputs, **kw)  # type: ignore[arg-type]
    assert result.as_numpy("OUTPUT0") is not None


def _ok(response: httpx.Response) -> None:
    assert response.status_code == 200, response.text


def _workload(mesh: Mesh) -> None:
    client = httpclient.InferenceServerClient(mesh.url, concurrency=4)
    admin = Admin(mesh.url)
    for _ in range(20):
        _infer(client)
    # no dynamic batching and an idle mesh: admission's direct branch (shared.fleet.direct_path)
    for _ in range(3):
        tensor = httpclient.InferInput("INPUT0", [1, 4], "INT32")
        tensor.set_data_from_numpy(np.arange(4, dtype=np.int32).reshape(1, 4))
        assert client.infer("custom_identity_int32", [tensor]).as_numpy("OUTPUT0") is not None
    # sequences: start, steps, end
    for step, (start, end) in enumerate([(True, False), (False, False), (False, True)]):
        value = np.full((1, 1), step + 1, dtype=np.int32)
        seq_input = httpclient.InferInput("INPUT", [1, 1], "INT32")
        seq_input.set_data_from_numpy(value)
        client.infer(
            "simple_sequence", [seq_input], sequence_id=7, sequence_start=start, sequence_end=end
        )
    # tenants, rate limits, weights, shadow
    limit = {"requests_per_second": 1000, "burst": 1000}
    tenant = {
        "api_keys": ["k-slot-test-0123456789"],
        "rate_limit": limit,
        "model_rate_limits": {"simple": limit},
        "priority": 1,
    }
    _ok(admin.call("PUT", "/v2/admin/tenants/acme", tenant))
    _ok(admin.call("GET", "/v2/admin/tenants/acme"))
    key = {"Authorization": "Bearer k-slot-test-0123456789"}
    with httpx.Client(base_url=f"http://{mesh.url}") as http:
        body = {"inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
        ]}  # fmt: skip
        deadline = time.monotonic() + 10  # gateways reload tenants within a second
        for _ in range(3):
            reply = eventually_sync(
                lambda: http.post("/v2/models/simple/infer", json=body, headers=key),
                lambda answer: answer.status_code != 401,
                deadline - time.monotonic(),
                every=0.1,
            )
            assert reply.status_code == 200, reply.text
    _ok(admin.weights("simple", {"1": 100}))
    _ok(admin.call("DELETE", "/v2/admin/models/simple/weights"))
    assert (
        admin.call(
            "PUT", "/v2/admin/models/simple/shadow", {"version": 1, "percent": 50}
        ).status_code
        == 200
    )
    for _ in range(4):
        _infer(client)
    _ok(admin.call("DELETE", "/v2/admin/models/simple/shadow"))
    _ok(admin.call("DELETE", "/v2/admin/tenants/acme"))
    # model control, log and trace settings
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    client.unload_model("mlp", headers=auth)
    client.load_model("mlp", headers=auth)
    client.update_log_settings({"log_verbose_level": 1}, headers=auth)
    client.update_log_settings({"log_verbose_level": 0}, headers=auth)
    client.update_trace_settings(
        "simple", {"trace_level": ["TIMESTAMPS"], "trace_count": "2"}, headers=auth
    )
    for _ in range(3):
        _infer(client)
    client.update_trace_settings(
        "simple", {"trace_level": ["OFF"], "trace_count": "-1"}, headers=auth
    )
    # a worker frozen with work in hand: a second one reclaims it after the dead bound
    mesh.start_worker("worker-2")
    mesh.wait_ready(["simple"])
    mesh.processes["worker"].send_signal(signal.SIGSTOP)
    try:
        for _ in range(6):
            _infer(client, timeout=30_000_000)
        time.sleep(3)
    finally:
        mesh.processes["worker"].send_signal(signal.SIGCONT)
    time.sleep(2)  # reconcile loops, heartbeats and reclaim passes run meanwhile
    client.close()


def test_every_call_of_a_real_run_stays_in_one_slot(recorded: tuple[Mesh, Recorder]) -> None:
    _, recorder = recorded
    recorder.__exit__()
    lines = recorder.path.read_text().count("\n")
    assert lines > 500, f"the recording has only {lines} commands: was MONITOR attached?"
    text = recorder.path.read_text()
    for used in ("EVALSHA", '"MULTI"', "XREADGROUP", '"lua"'):
        assert used in text, f"the workload sent no {used}"
    direct = '"XADD", "conch:m:{custom_identity_int32}:batch:1", "*", "h"'
    assert direct in text, "the workload sent no request down the direct path"
    found = recorder.violations()
    assert not found, "calls whose keys hash to different slots:\n" + "\n".join(found)
