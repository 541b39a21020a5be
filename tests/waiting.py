"""Waiting in a test for something another task or process does."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def until(condition: Callable[[], bool], within: float) -> bool:
    """Whether ``condition()`` became true within ``within`` seconds (checked every 20 ms); the
    caller asserts on it."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        if condition():
            return True
        await asyncio.sleep(0.02)
    return condition()
