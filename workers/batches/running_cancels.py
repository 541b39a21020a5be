"""Telling an ordinary model whose batch is running that a client cancelled its request.

A decoupled batch's streams are watched by ``workers.batches.stream_batch``; an ordinary batch runs
in one ``execute`` call, and a model that polls ``request.is_cancelled()`` (the Python backend)
should see it turn true there too. While the execution runs longer than one poll, the worker
checks the batch's requests every ``POLL_S`` (what its cancel listener heard, then one MGET of
their keys) and hands the newly cancelled ids to the instance's ``cancel`` hook. A batch that
finishes within the first poll costs nothing; backends without the hook (ONNX Runtime, PyTorch)
are not watched: their batch finishes and the answer of a cancelled request is dropped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import TypeVar

import redis.asyncio as aioredis

from shared.fleet.cancel_listener import CancelledRequests
from workers.backend import ModelInstance, ModelRequest
from workers.batches.cancel_check import POLL_S, cancelled_ids

log = logging.getLogger(__name__)

T = TypeVar("T")


def tells_cancels(instance: ModelInstance) -> bool:
    """Whether the instance's backend passes cancellations on to the model."""
    return type(instance).cancel is not ModelInstance.cancel


def run_watched(
    r: aioredis.Redis,
    model: str,
    requests: Sequence[ModelRequest],
    heard: CancelledRequests,
    instance: ModelInstance,
) -> Callable[[asyncio.Future[T]], Awaitable[T]]:
    """How to await the execution: plainly, or (a backend that tells its models) watched."""
    if not tells_cancels(instance):
        return _plain
    ids = [request.id for request in requests]
    return partial(_watched, r=r, model=model, request_ids=ids, heard=heard, instance=instance)


async def _plain(running: asyncio.Future[T]) -> T:
    return await running


async def _watched(
    running: asyncio.Future[T],
    *,
    r: aioredis.Redis,
    model: str,
    request_ids: Sequence[str],
    heard: CancelledRequests,
    instance: ModelInstance,
) -> T:
    """The execution's result; meanwhile cancellations of its requests reach the instance."""
    told: set[str] = set()
    while True:
        done, _ = await asyncio.wait({running}, timeout=POLL_S)
        if done:
            return running.result()
        fresh = [rid for rid in request_ids if rid not in told]
        cancelled = {rid for rid in fresh if rid in heard}
        try:
            cancelled |= await cancelled_ids(r, model, [i for i in fresh if i not in cancelled])
        except Exception:
            log.debug("could not read cancel keys of a running batch", exc_info=True)
        if cancelled:
            told |= cancelled
            # A Python model's cancel is a pipe write that waits behind a batch being sent.
            await asyncio.to_thread(instance.cancel, sorted(cancelled))
