"""Waiting in a test for something another task or process does: the tests' one poller.

Each helper checks first, then every ``every`` seconds until ``within`` seconds have passed, and
once more at the end. A condition may raise to stop the wait early (a process that exited, a
task that failed). Which one to use:

- ``until`` (async) / ``until_sync``: whether ``condition()`` became true in time; the caller
  asserts on it (``assert await until(lambda: ..., 5), "what was expected"``);
- ``eventually`` (async probe) / ``eventually_sync``: the last value a probe returned, once
  ``ok(value)`` held or time ran out; the caller asserts on the value, so a failure shows it;
- ``wait_until``: the seconds it took, or ``TimeoutError`` with ``failure`` as its message (a
  string, or a callable for one built at the end: logs). For start-up waits and for tests that
  assert on how long something took;
- ``retrying_sync``: the value of a call that raises until something is back (a restarted
  Redis, a registry heartbeats restore); after the bound, its last error propagates.

A loop in a test that waits for something uses these (``tests/unit/test_test_habits.py`` checks).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def until(condition: Callable[[], bool], within: float, every: float = 0.02) -> bool:
    """Whether ``condition()`` became true within ``within`` seconds; the event loop runs
    meanwhile. The caller asserts on it."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        if condition():
            return True
        await asyncio.sleep(every)
    return bool(condition())


def until_sync(condition: Callable[[], object], within: float, every: float = 0.02) -> bool:
    """``until`` for a test without an event loop (it sleeps between checks)."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(every)
    return bool(condition())


async def eventually(
    probe: Callable[[], Awaitable[T]],
    ok: Callable[[T], bool],
    within: float = 3.0,
    every: float = 0.005,
) -> T:
    """Poll ``await probe()`` until ``ok`` holds for its value; return the last value (the
    caller asserts on it)."""
    end = time.monotonic() + within
    while True:
        value = await probe()
        if ok(value) or time.monotonic() > end:
            return value
        await asyncio.sleep(every)


def eventually_sync(
    probe: Callable[[], T], ok: Callable[[T], bool], within: float, every: float = 0.02
) -> T:
    """``eventually`` for a plain function, sleeping between calls."""
    end = time.monotonic() + within
    while True:
        value = probe()
        if ok(value) or time.monotonic() > end:
            return value
        time.sleep(every)


def wait_until(
    condition: Callable[[], object],
    within: float,
    every: float = 0.02,
    failure: str | Callable[[], str] = "",
) -> float:
    """Seconds until ``condition()`` held; ``TimeoutError`` after ``within`` seconds."""
    start = time.monotonic()
    while True:
        if condition():
            return time.monotonic() - start
        if time.monotonic() - start > within:
            message = failure() if callable(failure) else failure
            raise TimeoutError(message or f"condition not met within {within} s")
        time.sleep(every)


def retrying_sync(
    call: Callable[[], T],
    within: float,
    every: float = 0.02,
    errors: type[BaseException] | tuple[type[BaseException], ...] = Exception,
) -> T:
    """``call()``'s value, the first time it returns instead of raising one of ``errors``;
    after ``within`` seconds, the error of its last try propagates."""
    end = time.monotonic() + within
    while True:
        try:
            return call()
        except errors:
            if time.monotonic() > end:
                raise
        time.sleep(every)
