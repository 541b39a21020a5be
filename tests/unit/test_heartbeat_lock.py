"""The heartbeat's lock taken from an event loop (``HeartbeatThread.lock.held``).

A worker that stops announcing a version takes the lock on a thread, because the beat in flight
may hold it for seconds on a stalled Redis. Shutdown cancels that wait; the thread takes the lock
all the same once the beat ends, and must give it back, or the heartbeat thread never beats again
and shutdown's own wait for the lock never ends.
"""

from __future__ import annotations

import asyncio

import pytest

from shared.fleet.heartbeat_thread import HeartbeatThread


def _beats() -> HeartbeatThread:
    # Never started: the lock alone is under test.
    return HeartbeatThread(
        "redis://127.0.0.1:1/0", "worker", "w-test", ttl_ms=3_000, interval_ms=1_000, info=dict
    )


async def test_a_cancelled_wait_for_the_lock_gives_it_back_once_the_thread_took_it() -> None:
    beats = _beats()
    beats.lock.acquire()  # a beat in progress
    entered = False

    async def leave() -> None:
        nonlocal entered
        async with beats.lock.held():
            entered = True

    waiting = asyncio.create_task(leave())
    await asyncio.sleep(0.1)  # its thread now waits behind the beat
    waiting.cancel()
    beats.lock.release()  # the beat ends: the waiting thread takes the lock
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert not entered
    # Given back by the cancelled wait: the next beat can take it.
    took = await asyncio.to_thread(beats._held.acquire, True, 2.0)
    assert took, "the lock stayed held after its waiter was cancelled"
    beats._held.release()


async def test_the_lock_is_held_inside_and_free_after() -> None:
    beats = _beats()
    async with beats.lock.held():
        assert not beats._held.acquire(blocking=False)
    assert beats._held.acquire(blocking=False)
    beats._held.release()
