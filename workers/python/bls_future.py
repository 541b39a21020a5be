"""A coroutine run on the BLS client's loop for a caller on another thread (``exec`` on
``execute``'s thread, ``async_exec`` on the model's own loop).

As ``asyncio.run_coroutine_threadsafe``, with one difference that matters at c=1: the caller's
future is set in the very step in which the coroutine finishes. ``run_coroutine_threadsafe``
sets it from the task's done callback, one loop turn later, so the caller woke only after the
reply reader had sent its next read. A caller that cancels its future (an ``async_exec``
cancelled) cancels the coroutine, as there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


def run_threadsafe(call: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop) -> Future[T]:
    done: Future[T] = Future()

    async def settle() -> None:
        try:
            result = await call
        except BaseException as exc:  # handed to the caller, who reads it from the future
            if done.set_running_or_notify_cancel():
                done.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        if done.set_running_or_notify_cancel():
            done.set_result(result)

    def start() -> None:
        task = loop.create_task(settle())
        done.add_done_callback(lambda f: f.cancelled() and loop.call_soon_threadsafe(task.cancel))

    loop.call_soon_threadsafe(start)
    return done
