"""What each process of one gateway service is doing, shared between them through a small file.

The processes of a gateway service accept connections from one socket, so an answer from any of
them speaks for all: ``/v2/health/ready`` may say ready only when every process that accepts
connections is ready. Each process writes its own byte of a memory-mapped file that the service's
supervisor creates (``gateway.runtime.supervisor``); a process reads its siblings' bytes when it
answers a readiness probe.
"""

from __future__ import annotations

import asyncio
import mmap
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

STARTING = 0  # not accepting connections: starting, waiting for its table, or not running
NOT_READY = 1  # accepting; its model table lacks an expected model
READY = 2  # accepting; its model table holds every expected model


class ProcessStatus:
    """One byte per process of the service, in a file every process maps."""

    def __init__(self, path: Path, count: int):
        self.path = path
        self.count = count
        with path.open("r+b") as file:
            self._map = mmap.mmap(file.fileno(), count)

    @classmethod
    def create(cls, count: int) -> ProcessStatus:
        fd, name = tempfile.mkstemp(prefix="conch-gateway-status-")
        with os.fdopen(fd, "wb") as file:
            file.write(bytes(count))
        return cls(Path(name), count)

    def get(self, index: int) -> int:
        return self._map[index]

    def set(self, index: int, value: int) -> None:
        self._map[index] = value

    def all(self) -> list[int]:
        return list(self._map[: self.count])

    def close(self, remove: bool = False) -> None:
        self._map.close()
        if remove:
            self.path.unlink(missing_ok=True)


@dataclass
class GatewayProcess:
    """This process's place in its gateway service: which one it is, and the shared status."""

    index: int
    status: ProcessStatus | None = None
    # Set when the process is asked to stop (SIGTERM), even while it is still starting: the
    # server waits for the app's start-up before it stops, so start-up must not wait past it.
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def serves_grpc(self) -> bool:
        """gRPC is served by the service's first process only (see ``gateway.grpc.service``)."""
        return self.index == 0

    def grpc_process_state(self) -> int:
        """The state of the process that serves gRPC (this one's own, if it is that one)."""
        return self.status.get(0) if self.status is not None else READY

    def set(self, value: int) -> None:
        if self.status is not None:
            self.status.set(self.index, value)

    def get(self) -> int:
        return self.status.get(self.index) if self.status is not None else STARTING

    def siblings(self) -> list[int]:
        if self.status is None:
            return []
        return [v for i, v in enumerate(self.status.all()) if i != self.index]
