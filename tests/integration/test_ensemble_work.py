"""Two schedulers advancing one ensemble request on a real redis-server: each plans from what it
knows of the request and writes a step's record, the next steps' admissions and the ack in one
pipeline; when one of them knew only part of the state (the other recorded a parallel branch),
the STEP script answers the whole state and the join step is still submitted, exactly once,
whichever order the two branches are recorded in. Then the last reply answers the request."""

from __future__ import annotations

import time

import pytest
import redis.asyncio as aioredis

from scheduler.ensemble.known import KnownStates
from scheduler.ensemble.progress import EnsembleProgress
from scheduler.ensemble.work import EnsembleWork
from shared.fleet import streams
from shared.model_config import ModelConfig, parse_pbtxt
from shared.model_config.ensemble_graph import steps_of
from shared.wire import envelope, keys
from shared.wire.envelope import InferRequest, Reply, RequestHeader, Tensor
from tests.unit.test_ensemble_graph import DIAMOND, PAIR

COMPOSING = parse_pbtxt(PAIR, "pair/config.pbtxt")
REPLY_TO = "conch:{gw:test}:replies"
ROW = b"\x00" * 16


def _resolve(model: str, version: int) -> tuple[ModelConfig, int] | None:
    return (COMPOSING, 1) if model == "pair" else None


def _scheduler(r: aioredis.Redis) -> EnsembleWork:
    progress = EnsembleProgress(r, DIAMOND, 1, steps_of(DIAMOND), 30_000, _resolve, direct=False)
    return EnsembleWork(progress, KnownStates())


async def _queued_steps(r: aioredis.Redis) -> list[str]:
    """The step requests queued on the composing model, by child id."""
    ids = []
    async for stream in r.scan_iter(match=keys.request_stream("pair", 1, 0)[:-1] + "*"):
        for _, fields in await r.xrange(stream):
            ids.append(envelope.decode_request(fields[keys.FIELD_DATA]).id)
    return sorted(ids)


async def _step_entry(r: aioredis.Redis, reply: Reply) -> streams.Entry:
    stream = keys.ensemble_steps("ens", 1)
    entry_id = await r.xadd(stream, {keys.FIELD_DATA: envelope.encode([reply])})
    read = await r.xreadgroup(keys.SCHEDULER_GROUP, "any", {stream: ">"})
    assert read[0][1][0][0] == entry_id
    return streams.Entry(stream.encode(), entry_id, {keys.FIELD_DATA: read[0][1][0][1][b"d"]})


def _reply(child: str, name: str) -> Reply:
    return Reply(id=child, model="pair", version=1, outputs=[Tensor(name, "FP32", [1, 4], ROW)])


@pytest.mark.parametrize("first", ["knows", "new"])
async def test_the_join_step_runs_once_whichever_scheduler_records_last(
    aredis: aioredis.Redis, first: str
) -> None:
    now = int(time.time() * 1000)
    await aredis.zadd(keys.ready("pair", 1), {"worker-1": now + 60_000})
    for stream in (keys.ensemble_steps("ens", 1), keys.request_stream("ens", 1, 1)):
        await aredis.xgroup_create(stream, keys.SCHEDULER_GROUP, id="0", mkstream=True)
    request = InferRequest(
        id="r1",
        model="ens",
        version=1,
        inputs=[Tensor("IN", "FP32", [1, 4], ROW)],
        outputs=[],
        parameters={},
        reply_to=REPLY_TO,
        deadline_ms=now + 30_000,
        enqueued_ms=now,
    )
    data = envelope.encode(request)
    request_stream = keys.request_stream("ens", 1, 1)
    entry_id = await aredis.xadd(request_stream, {"d": data})
    await aredis.xreadgroup(keys.SCHEDULER_GROUP, "owner", {request_stream: ">"})
    header = RequestHeader(
        id="r1",
        reply_to=REPLY_TO,
        deadline_ms=request.deadline_ms,
        priority=1,
        batch_size=1,
        shape_sig="",
        enqueued_ms=now,
    )

    owner, other = _scheduler(aredis), _scheduler(aredis)
    await owner.start([(header, request_stream.encode(), entry_id, data)], now)
    assert await _queued_steps(aredis) == ["r1.0", "r1.1"]  # both branches at once

    left = await _step_entry(aredis, _reply("r1.0", "X"))
    right = await _step_entry(aredis, _reply("r1.1", "Y"))
    if first == "knows":  # the owner records its branch with what it knows, then the other
        await owner.step_replies([left], now)
        await other.step_replies([right], now)
    else:  # the other first (it knows nothing), then the owner, whose view lacks that branch
        await other.step_replies([right], now)
        await owner.step_replies([left], now)
    assert await _queued_steps(aredis) == ["r1.0", "r1.1", "r1.2"]
    steps = keys.ensemble_steps("ens", 1)
    assert (await aredis.xpending(steps, keys.SCHEDULER_GROUP))["pending"] == 0

    last = await _step_entry(aredis, _reply("r1.2", "X"))
    await other.step_replies([last], now)
    (answer,) = [envelope.decode_replies(f[b"d"]) for _, f in await aredis.xrange(REPLY_TO)]
    assert [(r.id, [t.name for t in r.outputs], r.error) for r in answer] == [("r1", ["OUT"], "")]
    assert await aredis.exists(keys.ensemble_state("ens", 1, "r1")) == 0
    assert (await aredis.xpending(request_stream, keys.SCHEDULER_GROUP))["pending"] == 0
    assert int(await aredis.hget(keys.stats("ens", 1), "success_count")) == 1
