"""The registry against a real redis-server: who is alive, what is loaded, which configs exist.

Liveness is a score in the future: a service or worker that stops refreshing it stops counting
without anyone cleaning up after it.
"""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from shared.fleet import heartbeats, model_registry, readiness
from shared.model_config import ModelConfig, parse_pbtxt
from shared.runtime import clock
from shared.wire import keys

SHORT_TTL_MS = 60
# Refreshed every third of this, for longer than this, under whatever load the tests run.
REFRESH_TTL_MS = 300


def config(name: str = "simple", max_batch_size: int = 8, delay_us: int = 100) -> ModelConfig:
    return parse_pbtxt(
        f"""
        name: "{name}"
        platform: "onnxruntime_onnx"
        max_batch_size: {max_batch_size}
        input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }} ]
        output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }} ]
        instance_group [ {{ count: 2 kind: KIND_CPU }} ]
        dynamic_batching {{
          preferred_batch_size: [ 2, 4 ]
          max_queue_delay_microseconds: {delay_us}
          priority_levels: 2
          default_priority_level: 1
          priority_queue_policy {{
            key: 2
            value {{ timeout_action: DELAY default_timeout_microseconds: 7 max_queue_size: 3 }}
          }}
        }}
        parameters {{ key: "k" value: {{ string_value: "v" }} }}
        """
    )


# --- heartbeats --------------------------------------------------------------------------------


async def test_heartbeat_makes_a_service_live(aredis: aioredis.Redis) -> None:
    await heartbeats.heartbeat(aredis, "gateway", "gw-1", {"port": "8000"}, ttl_ms=5_000)
    assert await heartbeats.live_ids(aredis, "gateway") == {"gw-1"}
    info = await aredis.hgetall(keys.service_info("gateway", "gw-1"))
    assert info == {b"port": b"8000"}


async def test_liveness_is_per_kind(aredis: aioredis.Redis) -> None:
    await heartbeats.heartbeat(aredis, "scheduler", "s-1", {}, ttl_ms=5_000)
    await heartbeats.heartbeat(aredis, "worker", "w-1", {}, ttl_ms=5_000)
    assert await heartbeats.live_ids(aredis, "scheduler") == {"s-1"}
    assert await heartbeats.live_ids(aredis, "worker") == {"w-1"}
    assert await heartbeats.live_ids(aredis, "gateway") == set()


async def test_heartbeat_expires_without_a_refresh(aredis: aioredis.Redis) -> None:
    await heartbeats.heartbeat(aredis, "scheduler", "dying", {"pid": "1"}, ttl_ms=SHORT_TTL_MS)
    await heartbeats.heartbeat(aredis, "scheduler", "steady", {"pid": "2"}, ttl_ms=60_000)
    assert await heartbeats.live_ids(aredis, "scheduler") == {"dying", "steady"}
    await asyncio.sleep(SHORT_TTL_MS / 1000 + 0.05)
    assert await heartbeats.live_ids(aredis, "scheduler") == {"steady"}
    # Its details expire with it.
    assert await aredis.exists(keys.service_info("scheduler", "dying")) == 0
    assert await aredis.exists(keys.service_info("scheduler", "steady")) == 1


async def test_refreshed_heartbeat_stays_live(aredis: aioredis.Redis) -> None:
    for _ in range(4):
        await heartbeats.heartbeat(aredis, "worker", "w", {}, ttl_ms=REFRESH_TTL_MS)
        await asyncio.sleep(REFRESH_TTL_MS / 1000 / 3)
    assert await heartbeats.live_ids(aredis, "worker") == {"w"}


async def test_heartbeat_refresh_updates_the_info(aredis: aioredis.Redis) -> None:
    await heartbeats.heartbeat(aredis, "worker", "w", {"models": "a"}, ttl_ms=5_000)
    await heartbeats.heartbeat(aredis, "worker", "w", {"models": "a,b"}, ttl_ms=5_000)
    info_key = keys.service_info("worker", "w")
    assert await aredis.hget(info_key, "models") == b"a,b"
    assert 0 < await aredis.pttl(info_key) <= 5_000


async def test_deregister_removes_a_service_at_once(aredis: aioredis.Redis) -> None:
    await heartbeats.heartbeat(aredis, "gateway", "gw", {"port": "1"}, ttl_ms=60_000)
    await heartbeats.deregister(aredis, "gateway", "gw")
    assert await heartbeats.live_ids(aredis, "gateway") == set()
    assert await aredis.exists(keys.service_info("gateway", "gw")) == 0


# --- readiness ---------------------------------------------------------------------------------


async def test_mark_ready_reports_live_instances_per_version(aredis: aioredis.Redis) -> None:
    await readiness.mark_ready(aredis, "w1", {("simple", 1): 2, ("simple", 2): 1}, ttl_ms=5_000)
    await readiness.mark_ready(aredis, "w2", {("simple", 1): 3}, ttl_ms=5_000)
    state = await readiness.ready_versions(aredis, ["simple"])
    assert state == {"simple": {1: 5, 2: 1}}


async def test_readiness_expires_with_the_worker(aredis: aioredis.Redis) -> None:
    await readiness.mark_ready(aredis, "dying", {("simple", 1): 2}, ttl_ms=SHORT_TTL_MS)
    await readiness.mark_ready(aredis, "steady", {("simple", 1): 1}, ttl_ms=60_000)
    assert await readiness.ready_versions(aredis, ["simple"]) == {"simple": {1: 3}}
    await asyncio.sleep(SHORT_TTL_MS / 1000 + 0.05)
    assert await readiness.ready_versions(aredis, ["simple"]) == {"simple": {1: 1}}


async def test_a_version_once_loaded_stays_listed_with_zero_instances(
    aredis: aioredis.Redis,
) -> None:
    await readiness.mark_ready(aredis, "w", {("simple", 3): 1}, ttl_ms=SHORT_TTL_MS)
    await asyncio.sleep(SHORT_TTL_MS / 1000 + 0.05)
    assert await readiness.ready_versions(aredis, ["simple"]) == {"simple": {3: 0}}


async def test_unmark_ready_removes_only_the_given_versions(aredis: aioredis.Redis) -> None:
    await readiness.mark_ready(aredis, "w", {("simple", 1): 1, ("simple", 2): 4}, ttl_ms=60_000)
    await readiness.unmark_ready(aredis, "w", [("simple", 1)])
    assert await readiness.ready_versions(aredis, ["simple"]) == {"simple": {1: 0, 2: 4}}


async def test_ready_versions_for_unknown_models_and_no_models(aredis: aioredis.Redis) -> None:
    await readiness.mark_ready(aredis, "w", {("simple", 1): 1}, ttl_ms=60_000)
    assert await readiness.ready_versions(aredis, []) == {}
    assert await readiness.ready_versions(aredis, ["simple", "ghost"]) == {
        "simple": {1: 1},
        "ghost": {},
    }


async def test_the_readiness_set_is_what_admission_reads(aredis: aioredis.Redis) -> None:
    """The gateway's enqueue script counts members of keys.ready with a score ahead of now."""
    await readiness.mark_ready(aredis, "w", {("simple", 1): 1}, ttl_ms=60_000)
    now = clock.now_ms()
    assert await aredis.zcount(keys.ready("simple", 1), now, "+inf") == 1
    assert await aredis.sismember(keys.model_versions("simple"), "1")


async def test_refreshing_readiness_keeps_a_worker_ready(aredis: aioredis.Redis) -> None:
    for _ in range(4):
        await readiness.mark_ready(aredis, "w", {("simple", 1): 2}, ttl_ms=REFRESH_TTL_MS)
        await asyncio.sleep(REFRESH_TTL_MS / 1000 / 3)
    assert await readiness.ready_versions(aredis, ["simple"]) == {"simple": {1: 2}}


# --- published configurations ------------------------------------------------------------------


async def test_nothing_published_reads_as_revision_0(aredis: aioredis.Redis) -> None:
    assert await model_registry.read_models(aredis) == (0, {})


async def test_publish_model_round_trips_the_configuration(aredis: aioredis.Redis) -> None:
    original = config()
    await model_registry.publish_model(aredis, original)
    rev, configs = await model_registry.read_models(aredis)
    assert rev == 1
    assert list(configs) == ["simple"]
    assert configs["simple"] == original
    got = configs["simple"]
    assert got.dynamic_batching is not None
    assert got.dynamic_batching.preferred_batch_size == [2, 4]
    assert got.dynamic_batching.queue_policy(2).timeout_action == "DELAY"
    assert got.instance_count == 2
    assert got.parameters == {"k": "v"}


async def test_each_publish_bumps_the_revision_and_replaces_the_config(
    aredis: aioredis.Redis,
) -> None:
    await model_registry.publish_model(aredis, config("simple", delay_us=100))
    await model_registry.publish_model(aredis, config("other"))
    await model_registry.publish_model(aredis, config("simple", delay_us=900))
    rev, configs = await model_registry.read_models(aredis)
    assert rev == 3
    assert set(configs) == {"simple", "other"}
    batching = configs["simple"].dynamic_batching
    assert batching is not None and batching.max_queue_delay_microseconds == 900
