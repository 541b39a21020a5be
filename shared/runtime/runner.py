"""Run a service's main coroutine on uvloop and stop it cleanly on SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)


def run_service(main: Coroutine[Any, Any, None]) -> None:
    runner: Callable[[Coroutine[Any, Any, None]], None]
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        runner = asyncio.run
    runner(_supervised(main))


async def _supervised(main: Coroutine[Any, Any, None]) -> None:
    task = asyncio.ensure_future(main)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _stop, task, sig)
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _stop(task: asyncio.Future[None], sig: signal.Signals) -> None:
    log.info("stopping", extra={"signal": sig.name})
    task.cancel()
