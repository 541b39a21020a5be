"""One process of a gateway service: uvicorn serving the socket its supervisor bound.

``python -m gateway.runtime.serve --fd N --index I --status PATH`` is started by
``gateway.runtime.supervisor`` only; run ``python -m gateway`` (or ``conch gateway``) instead.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import os
import signal
import socket
from pathlib import Path
from types import FrameType

import uvicorn

from gateway.rest.app import app_from_env
from gateway.runtime import tls
from gateway.runtime.status import GatewayProcess, ProcessStatus
from gateway.settings import GatewaySettings, graceful_shutdown_s
from shared.runtime import ticks


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gateway.runtime.serve", description=__doc__)
    parser.add_argument("--fd", type=int, required=True, help="the listening socket, inherited")
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--status", required=True, help="the service's shared status file")
    parser.add_argument("--parent", type=int, required=True, help="the supervisor's pid")
    args = parser.parse_args(argv)
    _stop_with(args.parent)
    status = ProcessStatus(Path(args.status), args.count)
    process = GatewayProcess(args.index, status)
    settings = GatewaySettings.from_env()
    app = app_from_env(process)
    config = uvicorn.Config(
        app,
        loop="uvloop",
        # Inference answered below the ASGI layer (gateway.rest.protocol, measured there);
        # "httptools" instead would answer it through ASGI (gateway.rest.fastpath), the same way.
        http="gateway.rest.protocol:InferHttpProtocol",
        lifespan="on",
        access_log=False,
        proxy_headers=False,
        server_header=False,
        log_config=None,
        # SIGTERM: stop accepting, answer every request in flight (up to its deadline), then
        # stop the reply reader and leave the registry.
        timeout_graceful_shutdown=graceful_shutdown_s(settings),  # type: ignore[arg-type]  # uvicorn annotates int, waits with it as a float timeout
        # HTTPS (and mutual TLS): uvicorn wraps the inherited socket with this context.
        **tls.uvicorn_options(settings),
    )
    sock = socket.socket(fileno=args.fd)
    QuietServer(config, process.stopping).run(sockets=[sock])


class QuietServer(uvicorn.Server):
    """uvicorn's main loop wakes every 0.1 s to look for a stop request; this one wakes once a
    second (the Date header's resolution, which its tick refreshes) and at once when a stop
    signal arrives: an idle gateway process should not wake ten times a second for nothing."""

    _wake: asyncio.Event | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    def __init__(self, config: uvicorn.Config, stopping: asyncio.Event):
        super().__init__(config)
        # Told of a stop even during the app's start-up (``GatewayProcess.stopping``).
        self._stopping = stopping

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    async def main_loop(self) -> None:
        self._wake = asyncio.Event()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            with contextlib.suppress(TimeoutError):
                # On whole seconds of the loop's clock, as the heartbeat (``shared.runtime.ticks``).
                await asyncio.wait_for(self._wake.wait(), ticks.until_boundary(1.0))
            counter = (counter + 10) % 864_000  # a multiple of 10: on_tick's once-a-second work
            should_exit = await self.on_tick(counter)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                self._loop.call_soon_threadsafe(self._stopping.set)
                if self._wake is not None:
                    self._loop.call_soon_threadsafe(self._wake.set)


def _stop_with(parent: int) -> None:
    """A process whose supervisor died (SIGKILL, OOM) must not go on holding the port and its
    registration: the kernel sends it SIGTERM then (Linux's PR_SET_PDEATHSIG), and it drains."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # it died before the line above
        raise SystemExit(0)


_PR_SET_PDEATHSIG = 1

if __name__ == "__main__":
    main()
