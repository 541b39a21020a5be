"""A TCP forwarder that delays every chunk by a one-way latency, in each direction: a network
hop's delay where the kernel's ``tc netem`` is missing (the lab's hosts, ``tests.netns_lab``).

``python -m tests.delay_proxy LISTEN_HOST:PORT TARGET_HOST:PORT DELAY_FILE``; the delay in
milliseconds is read from DELAY_FILE (re-read when it changes), so one run can step through
several delays. Order is kept: a chunk is written no earlier than its arrival plus the delay,
and never before the chunks that arrived before it. Bandwidth is not limited.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from pathlib import Path

import uvloop


class Delay:
    def __init__(self, path: Path):
        self.path = path
        self.seconds = 0.0
        self._mtime = 0.0

    async def follow(self) -> None:
        while True:
            with contextlib.suppress(OSError, ValueError):
                mtime = self.path.stat().st_mtime
                if mtime != self._mtime:
                    self._mtime = mtime
                    self.seconds = float(self.path.read_text().strip() or 0) / 1000
            await asyncio.sleep(0.1)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: Delay) -> None:
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            due, data = await queue.get()
            if not data:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            if queue.empty():
                await writer.drain()

    sender = asyncio.create_task(send())
    try:
        while data := await reader.read(1 << 16):
            queue.put_nowait((time.monotonic() + delay.seconds, data))
    except (ConnectionError, OSError):
        pass
    finally:
        queue.put_nowait((0.0, b""))
        with contextlib.suppress(Exception):
            await sender
        with contextlib.suppress(Exception):
            writer.close()


async def main(listen: str, target: str, delay_file: str) -> None:
    delay = Delay(Path(delay_file))
    follower = asyncio.create_task(delay.follow())
    target_host, _, target_port = target.rpartition(":")

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(target_host, int(target_port))
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pump(reader, up_writer, delay), _pump(up_reader, writer, delay))

    host, _, port = listen.rpartition(":")
    server = await asyncio.start_server(handle, host, int(port), reuse_address=True)
    print(f"delay proxy {listen} -> {target} (pid {os.getpid()})", flush=True)
    async with server:
        await server.serve_forever()
    follower.cancel()


if __name__ == "__main__":
    uvloop.run(main(*sys.argv[1:4]))
