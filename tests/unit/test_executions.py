"""Where a worker runs an instance's executions: quick tensor executions inline on the loop, slow
ones and other backends on the pool, and ``wait_idle`` still waits for pooled ones."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from workers.backend import Execution, ModelInstance, ModelRequest, TensorModelInstance
from workers.batches.executions import AUTO_INLINE_US, Executions, inline_bound_us


class _Tensor(TensorModelInstance):
    def __init__(self) -> None:
        super().__init__(config=None)  # type: ignore[arg-type]

    def run(self, inputs: dict[str, np.ndarray], output_names: list[str]) -> dict[str, Any]:
        return {}


class _Other(ModelInstance):
    def execute(self, requests: list[ModelRequest]) -> Execution:
        return Execution([])

    def unload(self) -> None:
        pass


def _where(seconds: float = 0.0) -> int:
    time.sleep(seconds)
    return threading.get_ident()


async def _threads(
    executions: Executions, instance: ModelInstance, seconds: list[float]
) -> list[bool]:
    """For each execution: whether it ran on the loop's thread."""
    loop_thread = threading.get_ident()
    return [await executions.run(instance, _where, s, timed=True) == loop_thread for s in seconds]


async def test_a_quick_tensor_instance_runs_inline_after_its_first_pooled_execution() -> None:
    executions = Executions(inline_us=50_000)
    executions.pool = ThreadPoolExecutor(2)
    try:
        assert await _threads(executions, _Tensor(), [0, 0, 0]) == [False, True, True]
    finally:
        executions.pool.shutdown()


async def test_a_slow_execution_sends_the_instance_back_to_the_pool() -> None:
    executions = Executions(inline_us=20_000)
    executions.pool = ThreadPoolExecutor(2)
    try:
        # quick (pool, timed), quick (inline), slow (inline, then its average is over the bound),
        # so the next goes to the pool, and stays there while the average is slow.
        ran_inline = await _threads(executions, _Tensor(), [0, 0, 0.2, 0])
        assert ran_inline == [False, True, True, False]
    finally:
        executions.pool.shutdown()


async def test_off_by_default_and_never_for_other_backends() -> None:
    for executions, instance in ((Executions(), _Tensor()), (Executions(50_000), _Other())):
        executions.pool = ThreadPoolExecutor(2)
        try:
            assert await _threads(executions, instance, [0, 0, 0]) == [False, False, False]
        finally:
            executions.pool.shutdown()


async def test_wait_idle_waits_for_a_pooled_execution_and_on_done_runs_once() -> None:
    executions = Executions(inline_us=50_000)
    executions.pool = ThreadPoolExecutor(2)
    instance, done = _Tensor(), []
    try:
        task = asyncio.create_task(
            executions.run(instance, _where, 0.2, on_done=lambda: done.append(1), timed=True)
        )
        await asyncio.sleep(0.05)
        assert await executions.wait_idle([instance], timeout_s=0.01) == [instance]
        assert await executions.wait_idle([instance]) == []
        await task
        await executions.run(instance, _where, 0, on_done=lambda: done.append(2), timed=True)
        assert done == [1, 2]
    finally:
        executions.pool.shutdown()


def test_auto_runs_inline_only_on_a_small_machine() -> None:
    assert inline_bound_us(-1, cpus=2) == AUTO_INLINE_US
    assert inline_bound_us(-1, cpus=1) == AUTO_INLINE_US
    assert inline_bound_us(-1, cpus=16) == 0
    assert inline_bound_us(0, cpus=2) == 0
    assert inline_bound_us(5000, cpus=16) == 5000
