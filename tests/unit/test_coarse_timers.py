"""gateway.core.coarse_timers: one loop timer for a process's fixed-delay calls, and a request
deadline with asyncio.timeout's semantics on top of it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import uvloop

from gateway.core import coarse_timers
from gateway.core.coarse_timers import DELAY_S, Deadline, after_delay


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    if request.param == "uvloop":
        return uvloop.run
    return asyncio.run


def test_calls_run_in_order_after_the_delay_and_cancelled_ones_never(run) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ran: list[tuple[int, float]] = []
        start = loop.time()

        def note(i: int) -> Callable[[], None]:
            return lambda: ran.append((i, loop.time() - start))

        handles = [after_delay(note(i)) for i in range(5)]
        handles[1].cancel()
        handles[3].cancel()
        await asyncio.sleep(DELAY_S / 2)
        assert ran == []
        await asyncio.sleep(DELAY_S)
        assert [i for i, _ in ran] == [0, 2, 4]
        assert all(t >= DELAY_S * 0.95 for _, t in ran)

    run(main())


def test_no_loop_timer_is_left_when_nothing_is_pending(run) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        loop = asyncio.get_running_loop()
        for _ in range(200):
            after_delay(lambda: None).cancel()
        queue = coarse_timers._queue(loop)
        assert len(queue._items) <= 65  # cancelled ones at the front are dropped as it goes
        await asyncio.sleep(DELAY_S * 1.5)
        assert queue._timer is None and not queue._items

    run(main())


def test_calls_added_later_wait_their_own_delay(run) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ran: list[str] = []
        after_delay(lambda: ran.append("first"))
        await asyncio.sleep(DELAY_S * 0.6)
        after_delay(lambda: ran.append("second"))
        await asyncio.sleep(DELAY_S * 0.6)
        assert ran == ["first"]
        await asyncio.sleep(DELAY_S * 0.6)
        assert ran == ["first", "second"]
        assert coarse_timers._queue(loop)._timer is None

    run(main())


@pytest.mark.parametrize("seconds", [0.03, DELAY_S * 1.5])
def test_deadline_raises_timeout_error_as_asyncio_timeout(run, seconds: float) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(TimeoutError), Deadline(seconds):
            await asyncio.sleep(10)
        took = loop.time() - start
        assert seconds * 0.95 <= took < seconds + 0.1
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0

    run(main())


def test_deadline_not_reached_leaves_no_timer_and_no_cancel(run) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        with Deadline(30) as bound:
            await asyncio.sleep(0)
        assert not bound.expired
        await asyncio.sleep(DELAY_S * 1.5)  # its pending arm was dropped, nothing fires
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0
        # One still running past DELAY_S gets its own timer, cancelled at the exit.
        with Deadline(30) as bound:
            await asyncio.sleep(DELAY_S * 1.5)
            assert bound._handle is not None
        assert bound._handle is None and not bound.expired

    run(main())


def test_a_cancel_from_outside_stays_a_cancel(run) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        async def guarded() -> None:
            with Deadline(30):
                await asyncio.sleep(10)

        task = asyncio.create_task(guarded())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
