"""A gateway process asked to stop while it is still starting stops at once.

uvicorn runs the app's start-up to its end before it acts on a SIGTERM, and a gateway's start-up
waits (up to 10 s each) for its first copies of the model table and the policy. With Redis
unreachable at that moment (a private Redis being restarted under ``conch up``), a stop held the
process for the whole bound: ``conch up`` took 15-20 s to exit, one time in ten, after a Redis
restart.
"""

from __future__ import annotations

import asyncio
import time

from conch.ports import free_port
from gateway.runtime.state import GatewayState
from gateway.runtime.status import GatewayProcess
from gateway.settings import GatewaySettings


async def test_a_stop_asked_during_start_up_ends_the_wait_for_first_copies() -> None:
    unreachable = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens: the table never loads
    process = GatewayProcess(0)
    state = GatewayState(GatewaySettings(redis_url=unreachable), process)
    starting = asyncio.create_task(state.start())
    try:
        await asyncio.sleep(0.5)
        assert not starting.done(), "start-up did not wait for the model table"
        asked = time.monotonic()
        process.stopping.set()  # what the server's SIGTERM handler does
        await asyncio.wait_for(starting, 5)
        took = time.monotonic() - asked
        assert took < 1.0, f"start-up ended {took:.2f} s after the stop was asked"
    finally:
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        await asyncio.wait_for(state.stop(), 15)
