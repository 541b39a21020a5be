"""``workers.python.bls_future.run_threadsafe``: a coroutine on another thread's loop, its result,
its exception or its cancellation handed to the caller as ``run_coroutine_threadsafe`` does."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import CancelledError

import pytest

from workers.python.bls_future import run_threadsafe


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=5)
    loop.close()


def test_the_result_and_the_exception_reach_the_caller(loop: asyncio.AbstractEventLoop) -> None:
    async def answer() -> int:
        await asyncio.sleep(0.01)
        return 42

    async def fail() -> int:
        raise ValueError("no")

    assert run_threadsafe(answer(), loop).result(timeout=5) == 42
    with pytest.raises(ValueError, match="no"):
        run_threadsafe(fail(), loop).result(timeout=5)


def test_a_caller_that_cancels_cancels_the_coroutine(loop: asyncio.AbstractEventLoop) -> None:
    started, stopped = threading.Event(), threading.Event()

    async def forever() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        finally:
            stopped.set()

    future = run_threadsafe(forever(), loop)
    assert started.wait(timeout=5)
    assert future.cancel()
    assert stopped.wait(timeout=5)
    with pytest.raises(CancelledError):
        future.result(timeout=1)


def test_async_exec_awaits_it_on_its_own_loop(loop: asyncio.AbstractEventLoop) -> None:
    async def answer() -> str:
        return "ok"

    async def caller() -> str:
        return await asyncio.wrap_future(run_threadsafe(answer(), loop))

    assert asyncio.run(caller()) == "ok"
