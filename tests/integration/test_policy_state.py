"""Admin writes, the gateways' cached policy, and fleet control messages on a real redis-server."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import redis.asyncio as aioredis

from gateway.admin.bodies import TenantBody, WeightsBody
from gateway.admin.store import AdminStore
from gateway.core import auth
from gateway.core.auth import RateLimit, TenantTable
from gateway.routing.traffic_table import Shadow, TrafficTable
from shared.fleet import control, heartbeats, model_registry, readiness
from shared.model_config import parse_pbtxt
from shared.storage import repository
from shared.wire import keys
from shared.wire.errors import ConchError, ErrorCode
from workers.loading.control import ModelControl

CONFIG = parse_pbtxt(
    """
    name: "simple"
    platform: "onnxruntime_onnx"
    max_batch_size: 8
    input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
    """
)


@pytest.fixture
async def store(aredis: aioredis.Redis) -> AdminStore:
    await model_registry.publish_model(aredis, CONFIG)
    await readiness.mark_ready(aredis, "worker-a", {("simple", 1): 1, ("simple", 3): 1}, 60_000)
    return AdminStore(aredis)


async def snapshot(r: aioredis.Redis) -> dict:
    state = {}
    for pattern in ("conch:{tenants}*", "conch:{policy}*"):
        async for key in r.scan_iter(match=pattern):
            kind = await r.type(key)
            if kind == b"hash":
                state[key] = await r.hgetall(key)
            elif kind == b"set":
                state[key] = await r.smembers(key)
            else:
                state[key] = await r.get(key)
    return state


async def test_weights_reach_the_traffic_table(aredis: aioredis.Redis, store: AdminStore) -> None:
    traffic = TrafficTable(aredis)
    await traffic.refresh()
    assert traffic.weights == {}
    view = await store.put_weights("simple", WeightsBody({"1": 80, "3": 20}))
    assert view.weights == {"1": 80, "3": 20} and view.live_versions == [1, 3]
    await traffic.refresh()
    assert traffic.weights == {"simple": {1: 80, 3: 20}}
    await store.delete_weights("simple")
    await traffic.refresh()
    assert traffic.weights == {}


async def test_refused_writes_leave_redis_as_it_was(
    aredis: aioredis.Redis, store: AdminStore
) -> None:
    await store.put_weights("simple", WeightsBody({"1": 100}))
    await store.put_tenant("owner", TenantBody(api_keys=["owner-key-0123456789"]))
    before = await snapshot(aredis)
    refused = [
        store.put_weights("simple", WeightsBody({"2": 10})),  # not loaded
        store.put_weights("simple", WeightsBody({"1": 0})),  # all zero
        store.put_weights("ghost", WeightsBody({"1": 1})),  # unknown model
        store.put_shadow("simple", Shadow(version=2, percent=5)),
        store.put_tenant("t", TenantBody(api_keys=["owner-key-0123456789"])),  # taken
        store.put_tenant("bad name", TenantBody()),
        store.put_tenant("t", TenantBody(api_keys=["short"])),
        store.get_tenant("ghost"),
        store.delete_tenant("ghost"),
    ]
    codes = []
    for call in refused:
        with pytest.raises(ConchError) as caught:
            await call
        codes.append(caught.value.code)
    assert set(codes) <= {ErrorCode.INVALID_ARG, ErrorCode.NOT_FOUND}
    assert await snapshot(aredis) == before


async def test_tenants_keys_and_revocation(aredis: aioredis.Redis, store: AdminStore) -> None:
    tenants = TenantTable(aredis, allow_anonymous=False)
    body = TenantBody(
        api_keys=["first-key-0123456789"],
        generate_keys=2,
        rate_limit=RateLimit(requests_per_second=50, burst=10),
        priority=2,
        models=["simple"],
    )
    view = await store.put_tenant("acme", body)
    assert len(view.generated_keys) == 2 and len(view.api_keys) == 3
    stored = await aredis.hgetall(keys.api_keys())
    assert b"first-key-0123456789" not in b"".join([*stored, *stored.values()])
    await tenants.refresh()
    for key in ["first-key-0123456789", *view.generated_keys]:
        assert tenants.identify(f"Bearer {key}").name == "acme"
    assert tenants.identify("Bearer first-key-0123456789").priority == 2

    # A PUT without api_keys keeps them; naming a key id keeps that one only.
    await store.put_tenant("acme", TenantBody(priority=1))
    assert len((await store.get_tenant("acme")).api_keys) == 3
    keep = auth.key_id(auth.hash_key("first-key-0123456789"))
    await store.put_tenant("acme", TenantBody(api_keys=[keep]))
    await tenants.refresh()
    assert tenants.identify("Bearer first-key-0123456789").priority == 0
    with pytest.raises(ConchError):
        tenants.identify(f"Bearer {view.generated_keys[0]}")

    await store.delete_tenant("acme")
    await tenants.refresh()
    with pytest.raises(ConchError) as caught:
        tenants.identify("Bearer first-key-0123456789")
    assert caught.value.code == ErrorCode.UNAUTHENTICATED
    assert await aredis.hlen(keys.api_keys()) == 0
    assert (await store.list_tenants()).tenants == []


async def test_tables_reload_only_when_the_revision_moves(
    aredis: aioredis.Redis, store: AdminStore
) -> None:
    traffic = TrafficTable(aredis)
    await store.put_weights("simple", WeightsBody({"1": 1}))
    await traffic.refresh()
    # A write that skips the revision counter is not seen: readers trust the counter.
    await aredis.hset(keys.weights(), "simple", b'{"3": 1}')
    await traffic.refresh()
    assert traffic.weights == {"simple": {1: 1}}
    await aredis.incr(keys.policy_rev())
    await traffic.refresh()
    assert traffic.weights == {"simple": {3: 1}}


async def test_control_messages_reach_workers_and_collect_their_answers(
    aredis: aioredis.Redis,
) -> None:
    await heartbeats.heartbeat(aredis, "worker", "w1", {}, 60_000)
    await heartbeats.heartbeat(aredis, "worker", "w2", {}, 60_000)
    cursor = await control.last_id(aredis)
    message = control.new_message(control.UNLOAD, "simple", versions=[1])
    await control.publish(aredis, message)
    read = await aredis.xread({keys.control_stream(): cursor}, count=10)
    assert control.decode_message(read[0][1][0][1][keys.FIELD_DATA]) == message
    assert (await control.read_states(aredis))["simple"].excluded == [1]

    async def answer_later() -> None:
        await asyncio.sleep(0.1)
        await control.answer(aredis, message.id, control.ControlAck(worker="w1", status="ok"))
        await heartbeats.deregister(aredis, "worker", "w2")  # w2 dies without answering

    task = asyncio.create_task(answer_later())
    acks, missing = await control.collect(aredis, message.id, {"w1", "w2"}, timeout_s=5)
    await task
    assert [a.worker for a in acks] == ["w1"] and missing == set()
    assert not await aredis.exists(keys.control_acks(message.id))


async def test_a_new_worker_loads_what_the_fleet_serves(
    aredis: aioredis.Redis, model_repository: Path, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    (repo / "simple").mkdir(parents=True)
    config = (model_repository / "simple" / "config.pbtxt").read_text()
    (repo / "simple" / "config.pbtxt").write_text(config + "version_policy: { all { } }\n")
    for version in (1, 2, 3):
        shutil.copytree(model_repository / "simple" / "1", repo / "simple" / str(version))
    shutil.copytree(model_repository / "mlp", repo / "mlp")
    await control.publish(aredis, control.new_message(control.UNLOAD, "simple", versions=[2]))
    await control.publish(aredis, control.new_message(control.UNLOAD, "mlp"))

    worker = ModelControl(SimpleNamespace(redis=aredis))  # type: ignore[arg-type]
    scan = await worker.startup_scan(repository.scan(repo))
    assert set(scan.models) == {"simple"}
    assert scan.models["simple"].versions == [1, 3]
    index = await control.read_index(aredis)
    assert index["simple"].versions == [1, 2, 3] and index["mlp"].versions == [1]
