"""An ensemble's readiness against a real redis-server: the schedulers mark it, and an unload
(the publisher removing a version from the ensemble's version set) is final.

The race this guards: a scheduler's heartbeat thread builds its readiness pipeline, a poll or
the repository API unloads the ensemble, and the pipeline lands after. If the marks put the
version back into the version set, the gateways see a ready version again and the scheduler,
reading the version back on its refresh, keeps marking it: the unloaded ensemble stays READY.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from scheduler.ensemble.host import EnsembleHost
from scheduler.settings import SchedulerSettings
from shared.fleet import readiness
from shared.model_config import parse_pbtxt
from shared.wire import keys
from workers.loading.ensemble_load import unpublish

STEP = parse_pbtxt(
    """
    name: "step_model"
    platform: "onnxruntime_onnx"
    max_batch_size: 8
    input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
    """
)
ENSEMBLE = parse_pbtxt(
    """
    name: "pair_ready"
    platform: "ensemble"
    max_batch_size: 8
    input [ { name: "A" data_type: TYPE_INT32 dims: [ 16 ] } ]
    output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 16 ] } ]
    ensemble_scheduling {
      step [ {
        model_name: "step_model"
        model_version: -1
        input_map { key: "INPUT0" value: "A" }
        output_map { key: "OUTPUT0" value: "SUM" }
      } ]
    }
    """
)


async def test_an_unloaded_ensemble_stays_unloaded_when_a_heartbeat_lands_late(
    aredis: aioredis.Redis,
) -> None:
    await aredis.delete(keys.model_versions("pair_ready"), keys.ready("pair_ready", 1))
    await aredis.sadd(keys.model_versions("pair_ready"), 1)  # published by a worker
    host = EnsembleHost(aredis, SchedulerSettings(), "scheduler-1", on_failure=lambda: None)
    configs = {"step_model": STEP, "pair_ready": ENSEMBLE}
    await host.observe(configs, {"step_model": {1: 1}, "pair_ready": {1: 0}})
    await host.mark(ENSEMBLE, {1: 0})
    assert (await readiness.ready_versions(aredis, ["pair_ready"]))["pair_ready"] == {1: 1}

    heartbeat = aredis.pipeline(transaction=False)  # built before the unload...
    host.queue_marks(heartbeat)
    await unpublish(aredis, "pair_ready", [1])
    await heartbeat.execute()  # ...sent after it
    assert await aredis.smembers(keys.model_versions("pair_ready")) == set()
    assert await readiness.ready_versions(aredis, ["pair_ready"]) == {"pair_ready": {}}

    # The scheduler's refresh reads the version set without the version: it stops marking.
    await host.observe(configs, {"step_model": {1: 1}})
    later = aredis.pipeline(transaction=False)
    host.queue_marks(later)
    await later.execute()
    assert await aredis.zcard(keys.ready("pair_ready", 1)) == 0
    assert await aredis.smembers(keys.model_versions("pair_ready")) == set()
