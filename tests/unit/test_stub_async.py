"""``workers.python.stub_async.await_``: an ``async def execute`` runs to completion on a loop the
thread keeps, and what it left behind is cancelled before the call returns (as ``asyncio.run``
did)."""

from __future__ import annotations

import asyncio
import threading

from workers.python.stub_async import await_


def test_plain_values_pass_and_coroutines_run_on_one_kept_loop() -> None:
    assert await_(5) == 5

    async def loop_of() -> asyncio.AbstractEventLoop:
        await asyncio.sleep(0)
        return asyncio.get_running_loop()

    first, second = await_(loop_of()), await_(loop_of())
    assert first is second and not first.is_closed()
    seen: list[asyncio.AbstractEventLoop] = []
    thread = threading.Thread(target=lambda: seen.append(await_(loop_of())))
    thread.start()
    thread.join(timeout=5)
    assert seen and seen[0] is not first  # one loop per thread


def test_tasks_left_behind_are_cancelled_before_it_returns() -> None:
    events: list[str] = []

    async def background() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            events.append("cancelled")
            raise

    async def execute() -> str:
        asyncio.get_running_loop().create_task(background())
        await asyncio.sleep(0)
        return "done"

    assert await_(execute()) == "done"
    assert events == ["cancelled"]


def test_an_exception_reaches_the_caller() -> None:
    async def execute() -> None:
        raise RuntimeError("model failed")

    try:
        await_(execute())
    except RuntimeError as exc:
        assert str(exc) == "model failed"
    else:
        raise AssertionError("no exception")
    assert await_(asyncio.sleep(0, result=1)) == 1  # the loop still serves
