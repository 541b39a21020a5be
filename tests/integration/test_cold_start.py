"""The gateway's side of on_demand mode against a real redis-server: a request for a cold model
records one demand and waits for the model to be ready, a failed load ends the wait, and the
wait is bounded.
"""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from gateway.core.cold_start import ColdStarts
from gateway.core.model_table import ModelTable
from shared.fleet import expected_models, model_registry, on_demand, readiness
from shared.fleet.control import IndexEntry
from shared.model_config import parse_pbtxt
from shared.wire import keys
from shared.wire.errors import ConchError, ErrorCode

PLAIN = """
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
"""
ENSEMBLE = """
name: "pipeline"
platform: "ensemble"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [
  { model_name: "first" model_version: -1
    input_map { key: "INPUT0" value: "X" } output_map { key: "OUTPUT0" value: "T" } },
  { model_name: "second" model_version: -1
    input_map { key: "INPUT0" value: "T" } output_map { key: "OUTPUT0" value: "Y" } }
] }
"""


@pytest.fixture
async def table(aredis: aioredis.Redis) -> ModelTable:
    await aredis.flushdb()
    entries = {n: IndexEntry(versions=[1], not_loaded=True) for n in ("cold", "first", "second")}
    entries["pipeline"] = IndexEntry(versions=[1], not_loaded=True)
    await expected_models.write_index(aredis, entries)
    await model_registry.publish_model(aredis, parse_pbtxt(ENSEMBLE))
    found = ModelTable(aredis)
    await found.refresh()
    return found


async def load(r: aioredis.Redis, table: ModelTable, name: str) -> None:
    """What a worker's load leaves in Redis: the config published, the version marked ready."""
    await model_registry.publish_model(r, parse_pbtxt(PLAIN.format(name=name)))
    await readiness.mark_ready(r, "worker-1", {(name, 1): 1}, 60_000)
    await table.refresh()


async def test_concurrent_misses_record_one_demand_and_all_wake_when_ready(
    aredis: aioredis.Redis, table: ModelTable
) -> None:
    cold = ColdStarts(aredis, table, timeout_s=30)
    waiters = [asyncio.create_task(cold.ensure_loaded("cold")) for _ in range(50)]
    await asyncio.sleep(0.2)
    assert not any(w.done() for w in waiters)
    assert list(await on_demand.read_demands(aredis)) == ["cold"]
    await load(aredis, table, "cold")
    assert await asyncio.wait_for(asyncio.gather(*waiters), 5) == [True] * 50
    assert await cold.ensure_loaded("cold") is False  # now a hit


async def test_a_model_not_in_the_index_is_left_to_the_normal_answer(
    aredis: aioredis.Redis, table: ModelTable
) -> None:
    cold = ColdStarts(aredis, table, timeout_s=30)
    assert not cold.loadable("nowhere")
    assert await cold.ensure_loaded("nowhere") is False
    assert await on_demand.read_demands(aredis) == {}


async def test_a_failed_load_ends_the_wait(aredis: aioredis.Redis, table: ModelTable) -> None:
    cold = ColdStarts(aredis, table, timeout_s=30)
    waiter = asyncio.create_task(cold.ensure_loaded("cold"))
    await asyncio.sleep(0.1)
    await expected_models.record_load_error(aredis, "cold", "worker-1", "bad file")
    await table.refresh()
    assert await asyncio.wait_for(waiter, 5) is True
    assert not cold.loadable("cold")  # the next request gets the error, without a new load


async def test_the_wait_is_bounded_and_says_which_model(
    aredis: aioredis.Redis, table: ModelTable
) -> None:
    cold = ColdStarts(aredis, table, timeout_s=30)
    with pytest.raises(ConchError) as waited:
        await cold.ensure_loaded("cold", limit_s=0.3)
    assert waited.value.code == ErrorCode.UNAVAILABLE
    assert "'cold'" in waited.value.message and "0.3 s" in waited.value.message


async def test_an_ensemble_demands_its_composing_models(
    aredis: aioredis.Redis, table: ModelTable
) -> None:
    cold = ColdStarts(aredis, table, timeout_s=30)
    waiter = asyncio.create_task(cold.ensure_loaded("pipeline"))
    await asyncio.sleep(0.2)
    assert sorted(await on_demand.read_demands(aredis)) == ["first", "second"]
    await load(aredis, table, "first")
    await load(aredis, table, "second")
    assert not waiter.done()  # ready once the schedulers mark the ensemble itself
    await readiness.mark_ready(aredis, "scheduler-1", {("pipeline", 1): 1}, 60_000)
    await aredis.sadd(keys.model_versions("pipeline"), 1)
    await table.refresh()
    assert await asyncio.wait_for(waiter, 5) is True
