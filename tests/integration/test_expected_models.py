"""What the mesh is expected to serve, against a real redis-server (shared.fleet.expected_models),
and the gateway's answer for a model its table does not hold yet (gateway.core.model_table)."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from gateway.core.model_table import ModelTable
from shared.fleet import control, expected_models, model_registry, readiness
from shared.fleet.control import IndexEntry
from shared.wire.errors import ConchError, ErrorCode
from tests.integration.test_liveness_and_readiness import config


async def test_the_index_is_replaced_by_each_scan_and_marked_written(
    aredis: aioredis.Redis,
) -> None:
    assert not (await expected_models.read(aredis)).scanned
    await expected_models.write_index(aredis, {"a": IndexEntry(versions=[1]), "b": IndexEntry()})
    await expected_models.write_index(aredis, {"a": IndexEntry(versions=[1, 2])})
    found = await expected_models.read(aredis)
    assert found.scanned
    assert found.index == {"a": IndexEntry(versions=[1, 2])}  # "b" left the disk: gone
    await expected_models.write_index(aredis, {})
    assert (await expected_models.read(aredis)).index == {}


async def test_a_load_request_forgets_the_last_failure(aredis: aioredis.Redis) -> None:
    await expected_models.record_load_error(aredis, "a", "w1", "ImportError: x")
    await expected_models.write_index(aredis, {"a": IndexEntry(versions=[1])})
    assert expected_models.expected(await expected_models.read(aredis)) == set()
    await control.publish(aredis, control.new_message(control.LOAD, "a"))
    assert expected_models.expected(await expected_models.read(aredis)) == {"a"}
    await control.publish(aredis, control.new_message(control.UNLOAD, "a"))
    assert expected_models.expected(await expected_models.read(aredis)) == set()


async def test_a_model_the_table_lacks_is_looked_up_before_it_is_called_unknown(
    aredis: aioredis.Redis,
) -> None:
    """The table refreshes every 250 ms; the data plane looks again at once on a miss, so a
    model a worker has just put in the index is "not at ready state", never "unknown"."""
    table = ModelTable(aredis)
    await table.refresh()
    with pytest.raises(ConchError) as unknown:
        await table.config_after_miss("simple")
    assert unknown.value.code is ErrorCode.NOT_FOUND
    await expected_models.write_index(aredis, {"simple": IndexEntry(versions=[1])})
    with pytest.raises(ConchError) as loading:  # the table itself has not refreshed since
        await table.config_after_miss("simple")
    assert loading.value.code is ErrorCode.UNAVAILABLE
    assert loading.value.message == (
        "Request for unknown model: 'simple' version 1 is not at ready state"
    )
    await model_registry.publish_model(aredis, config("simple"))
    assert (await table.config_after_miss("simple")).name == "simple"
    assert table.not_ready == ["simple"]  # published, not ready yet
    await readiness.mark_ready(aredis, "worker-1", {("simple", 1): 2}, 10_000)
    await table.refresh()
    assert table.not_ready == []
    await expected_models.record_load_error(aredis, "other", "w", "no GPU")
    await expected_models.write_index(
        aredis, {"simple": IndexEntry(versions=[1]), "other": IndexEntry(versions=[1])}
    )
    with pytest.raises(ConchError) as failed:
        await table.config_after_miss("other")
    assert failed.value.code is ErrorCode.NOT_FOUND and "failed to load: no GPU" in str(
        failed.value
    )
