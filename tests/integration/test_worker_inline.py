"""Quick tensor executions run inline on the worker's loop (issue 16): every batch is still
answered once, in its requests' order, acked once and counted once, and an expired request is
still answered with the timeout error instead of running."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis.asyncio as aioredis

from shared.wire import keys
from tests.waiting import eventually
from tests.worker_harness import (
    BATCHES,
    MODEL,
    VERSION,
    GateBackend,
    RunningWorker,
    batch,
    replies,
    write_repository,
)
from workers.backend import LoadSpec, ModelInstance, TensorModelInstance


class _QuickTensor(TensorModelInstance):
    """Identity over a batched tensor; records the thread of every execution."""

    def __init__(self, spec: LoadSpec, threads: list[int]):
        super().__init__(spec.config)
        self.threads = threads

    def run(self, inputs: dict[str, np.ndarray], output_names: list[str]) -> dict[str, Any]:
        self.threads.append(threading.get_ident())
        return {"OUTPUT0": inputs["INPUT0"] + 1}

    def unload(self) -> None:
        pass


@pytest.fixture
async def worker(
    tmp_path: Path, aredis: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[RunningWorker, list[int]]]:
    threads: list[int] = []

    def load(self: GateBackend, spec: LoadSpec) -> ModelInstance:
        return _QuickTensor(spec, threads)

    monkeypatch.setattr(GateBackend, "load", load)
    kwargs = aredis.connection_pool.connection_kwargs
    url = (
        f"unix://{kwargs['path']}?db={kwargs.get('db', 0)}"
        if "path" in kwargs
        else f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"
    )
    running = RunningWorker(url, write_repository(tmp_path / "repo"), inline_execution_us=1_000_000)
    await running.start()
    yield running, threads
    await running.stop()


async def test_batches_run_inline_after_the_first_and_each_is_answered_and_acked_once(
    worker, aredis
) -> None:
    _, threads = worker
    for n in range(4):
        await aredis.xadd(BATCHES, {keys.FIELD_DATA: batch(f"a{n}", f"b{n}", f"c{n}")})
        await eventually(lambda: replies(aredis), lambda r, n=n: len(r) == 3 * (n + 1), within=5.0)
    got = await replies(aredis)
    assert [r.id for r in got] == [f"{x}{n}" for n in range(4) for x in "abc"]
    assert [(r.error_code, r.error) for r in got if r.error_code] == []
    out = np.frombuffer(got[0].outputs[0].data, dtype=np.int32)
    assert out.tolist() == [1, 2, 3, 4]
    loop_thread = threading.get_ident()
    assert threads[0] != loop_thread, "the first execution is timed on the pool"
    assert threads[1:] == [loop_thread] * 3, "quick executions then run on the loop"
    assert int((await aredis.xpending(BATCHES, keys.WORKER_GROUP))["pending"]) == 0
    stats = await aredis.hgetall(keys.stats(MODEL, VERSION))
    assert stats[b"execution_count"] == b"4"
    assert stats[b"success_count"] == b"12"


async def test_an_expired_request_is_answered_without_running_inline(worker, aredis) -> None:
    _, threads = worker
    await aredis.xadd(BATCHES, {keys.FIELD_DATA: batch("warm")})
    await eventually(lambda: replies(aredis), lambda r: len(r) == 1, within=5.0)
    await aredis.xadd(BATCHES, {keys.FIELD_DATA: batch("late", deadline_in_ms=-1)})
    got = await eventually(lambda: replies(aredis), lambda r: len(r) == 2, within=5.0)
    assert got[1].id == "late" and got[1].error_code == "UNAVAILABLE"
    assert len(threads) == 1, "an expired request never runs"
