"""Frames of a decoupled model, from the backend's threads to the worker's event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np

from shared.envelope import Reply
from shared.errors import ConchError
from shared.model_config import ModelConfig
from workers.backend import FrameSink

Frame = Callable[[str, dict[str, np.ndarray] | None, ConchError | None, bool], None]


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
    ) -> None:
        self._loop.call_soon_threadsafe(self._frame, request_id, outputs, error, final)


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
    )


def output_datatype(config: ModelConfig, name: str) -> str | None:
    spec = config.output(name)
    return spec.datatype if spec is not None else None
