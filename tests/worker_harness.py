"""A worker service in the test's own process, serving a model through a backend the test
controls (``GateBackend``: execution waits on a gate, records what ran, can fail), on a real
Redis. Batches are written to the batch stream as a scheduler writes them."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import TypeVar

import numpy as np
import redis.asyncio as aioredis

from shared.wire import envelope, keys
from shared.wire.envelope import Batch, InferRequest, Reply, Tensor
from tests.waiting import until
from workers.backend import Backend, Execution, LoadSpec, ModelInstance, ModelRequest, ModelResult
from workers.service import WorkerService
from workers.settings import WorkerSettings

MODEL = "gated"
VERSION = 1
REPLIES = keys.reply_stream("worker-test")
BATCHES = keys.batch_stream(MODEL, VERSION)

T = TypeVar("T")


class GateBackend(Backend):
    name = "gate-test"

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.executed: list[str] = []
        self.fail = False
        self.running = 0
        self.unloads = 0
        self.unloaded_while_running = False

    def load(self, spec: LoadSpec) -> ModelInstance:
        return GateInstance(self)


class GateInstance(ModelInstance):
    def __init__(self, backend: GateBackend):
        self.backend = backend

    def execute(self, requests: list[ModelRequest]) -> Execution:
        b = self.backend
        b.running += 1
        try:
            b.entered.set()
            b.gate.wait(20)
            b.executed.extend(r.id for r in requests)
            if b.fail:
                raise RuntimeError("the backend failed")
            return Execution([ModelResult({"OUTPUT0": r.inputs["INPUT0"]}) for r in requests])
        finally:
            b.running -= 1

    def unload(self) -> None:
        b = self.backend
        b.unloads += 1
        if b.running:
            b.unloaded_while_running = True


def write_repository(root: Path) -> Path:
    model = root / MODEL
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(
        f'name: "{MODEL}"\nbackend: "gate-test"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] } ]\n'
    )
    return root


def batch(*request_ids: str, deadline_in_ms: int = 30_000) -> bytes:
    now = int(time.time() * 1000)
    requests = [
        envelope.encode(
            InferRequest(
                id=rid,
                model=MODEL,
                version=VERSION,
                inputs=[Tensor("INPUT0", "INT32", [1, 4], np.arange(4, dtype=np.int32).tobytes())],
                outputs=[],
                parameters={},
                reply_to=REPLIES,
                deadline_ms=now + deadline_in_ms,
                enqueued_ms=now,
            )
        )
        for rid in request_ids
    ]
    return envelope.encode(
        Batch(
            batch_id="b",
            model=MODEL,
            version=VERSION,
            formed_ms=now,
            requests=requests,
            queue_ns=[0] * len(requests),
        )
    )


async def replies(r: aioredis.Redis) -> list[Reply]:
    rows = await r.xrange(REPLIES)
    return [reply for _, f in rows for reply in envelope.decode_replies(f[keys.FIELD_DATA])]


class RunningWorker:
    def __init__(self, redis_url: str, repository: Path, **settings: object):
        self.backend = GateBackend()
        defaults: dict[str, object] = {
            "health_port": 0,
            "reclaim_interval_ms": 100,
            "drain_route_delay_s": 0.0,
        }
        self.settings = WorkerSettings(
            redis_url=redis_url,
            backend="gate-test",
            model_repository=str(repository),
            **{**defaults, **settings},
        )
        self.service = WorkerService(self.settings, backend=self.backend)
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        task = self.task = asyncio.create_task(self.service.run())

        def ready() -> bool:
            if task.done():
                task.result()  # raises what stopped it
            return self.service.ready.is_set()

        assert await until(ready, 20), "the worker did not become ready"

    async def stop(self) -> None:
        self.backend.gate.set()
        if self.task is not None:
            while not self.task.done():
                self.task.cancel()
                await asyncio.wait({self.task}, timeout=1)
