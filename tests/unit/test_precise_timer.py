"""The precise timer calls back on the loop at its instant, in order, and not once cancelled."""

from __future__ import annotations

import asyncio
import time

from shared.runtime.precise_timer import Alarm, PreciseTimer


async def test_callbacks_run_on_the_loop_in_due_order_and_not_before_due() -> None:
    timer, loop = PreciseTimer(), asyncio.get_running_loop()
    calls: list[tuple[str, float]] = []
    done = asyncio.Event()
    start = time.monotonic()
    timer.call_at(
        start + 0.06, lambda: (calls.append(("late", time.monotonic())), done.set()), loop
    )
    timer.call_at(start + 0.02, lambda: calls.append(("early", time.monotonic())), loop)
    await asyncio.wait_for(done.wait(), 5)
    assert [name for name, _ in calls] == ["early", "late"]
    assert calls[0][1] >= start + 0.02 and calls[1][1] >= start + 0.06


async def test_a_cancelled_callback_is_never_called() -> None:
    timer, loop = PreciseTimer(), asyncio.get_running_loop()
    called: list[str] = []
    done = asyncio.Event()
    start = time.monotonic()
    timer.call_at(start + 0.02, lambda: called.append("cancelled"), loop).cancel()
    timer.call_at(start + 0.05, done.set, loop)
    await asyncio.wait_for(done.wait(), 5)
    assert called == []


async def test_an_alarm_kept_at_one_instant_calls_back_once_and_moved_only_at_the_new_one() -> None:
    timer = PreciseTimer()
    calls: list[float] = []
    done = asyncio.Event()
    alarm = Alarm(lambda: (calls.append(time.monotonic()), done.set()), timer)
    start = time.monotonic()
    for _ in range(5):  # asked again at every arrival: one call
        alarm.keep(start + 0.02)
    alarm.keep(start + 0.05)  # the oldest request left: the instant moved
    await asyncio.wait_for(done.wait(), 5)
    await asyncio.sleep(0.05)
    assert len(calls) == 1 and calls[0] >= start + 0.05
    alarm.keep(time.monotonic() + 0.02)
    alarm.keep(None)
    await asyncio.sleep(0.06)
    assert len(calls) == 1
