"""Frames of a decoupled model, from the backend's threads to the worker's event loop, and
the ack of a batch whose streams all ended."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import redis.asyncio as aioredis

from shared import metrics
from shared.fleet import streams
from shared.fleet.fencing import queue_fenced_ack
from shared.model_config import ModelConfig
from shared.wire import keys
from shared.wire.envelope import Reply
from shared.wire.errors import ConchError
from workers.backend import FrameSink
from workers.loading.loader import LoadedVersion

log = logging.getLogger(__name__)

Frame = Callable[
    [str, dict[str, np.ndarray] | None, ConchError | None, bool, dict[str, Any] | None], None
]


class LoopSink(FrameSink):
    """Calls ``frame`` on the loop for each response, in the order they were sent."""

    def __init__(self, loop: asyncio.AbstractEventLoop, frame: Frame):
        self._loop = loop
        self._frame = frame

    def send(
        self,
        request_id: str,
        outputs: dict[str, np.ndarray] | None,
        error: ConchError | None,
        final: bool,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        self._loop.call_soon_threadsafe(self._frame, request_id, outputs, error, final, parameters)


def numbered(reply: Reply, seq: int, final: bool, worker: str) -> Reply:
    """The reply as frame ``seq`` of its request, from this worker."""
    return Reply(
        id=reply.id,
        model=reply.model,
        version=reply.version,
        outputs=reply.outputs,
        error_code=reply.error_code,
        error=reply.error,
        timing=reply.timing,
        worker=worker,
        seq=seq,
        final=final,
        parameters=reply.parameters,
    )


def output_datatype(config: ModelConfig, name: str) -> str | None:
    spec = config.output(name)
    return spec.datatype if spec is not None else None


async def ack_streamed(
    r: aioredis.Redis,
    worker_id: str,
    loaded: LoadedVersion,
    entry: streams.Entry,
    stats: dict[str, int],
) -> None:
    """The fenced ack of a decoupled batch with its statistics, retried while Redis is away."""
    name, version = loaded.name, loaded.version
    for attempt in range(50):
        try:
            async with r.pipeline(transaction=False) as pipe:
                queue_fenced_ack(
                    pipe,
                    entry.stream,
                    keys.stats(name, version),
                    keys.WORKER_GROUP,
                    worker_id,
                    entry.entry_id,
                    keys.batch_done_channel(name, version),
                    stats,
                    int(time.time() * 1000),
                )
                (acked,) = await pipe.execute()
            if not acked:
                metrics.record_late_result("worker", name, version)
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("could not ack a streamed batch (attempt %d)", attempt, exc_info=True)
            await asyncio.sleep(0.2)
