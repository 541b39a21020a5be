"""A TCP proxy on loopback that a test can make misbehave: stall connections (half-open: the
peer stops answering but the socket stays open), or cut a connection right after a command went
upstream and before its reply came back (what makes a client library retry a write).

It runs its own event loop on a thread, so it serves in-process clients and child processes
alike. Everything it forwards stays on loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass, field

from conch.ports import free_port
from conch.private_redis import PrivateRedis


@dataclass
class _Link:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    # Set: nothing more is forwarded either way (the sockets stay open).
    stalled: asyncio.Event = field(default_factory=asyncio.Event)
    # Set: the server's answers are dropped (the link is about to be cut).
    muted: bool = False

    def close(self) -> None:
        for writer in (self.client, self.upstream):
            with contextlib.suppress(Exception):
                writer.transport.abort()


class TcpProxy:
    def __init__(self, upstream_host: str, upstream_port: int):
        self.host = "127.0.0.1"
        self.port = free_port()
        self._upstream = (upstream_host, upstream_port)
        self._loop = asyncio.new_event_loop()
        self._links: list[_Link] = []
        self._stall_new = False
        self._cut_marker: bytes | None = None
        self._drop_marker: bytes | None = None
        self.cuts = 0
        self.connections = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="tcp-proxy")

    @classmethod
    def to_redis(cls, server: PrivateRedis) -> TcpProxy:
        """A proxy in front of a private redis-server's TCP port."""
        return cls(server.host, server.port)

    def url(self, db: int = 0) -> str:
        return f"redis://{self.host}:{self.port}/{db}"

    # --- misbehaviour -------------------------------------------------------------------------

    def stall_existing(self) -> int:
        """Every open connection goes silent both ways (half-open); new ones work. Returns how
        many were stalled."""
        return self._call(self._stall_existing)

    def stall_all(self, stalled: bool = True) -> None:
        """Stall open connections and every new one (a Redis that stopped answering), or stop
        stalling new ones (open stalled connections stay stalled)."""
        self._stall_new = stalled
        if stalled:
            self.stall_existing()

    def cut_after(self, marker: bytes) -> None:
        """Once: the next time a client sends bytes containing ``marker``, forward them, then
        cut that connection before any answer reaches the client."""
        self._cut_marker = marker

    def drop_reply_containing(self, marker: bytes) -> None:
        """Once: the next answer from the server containing ``marker`` is dropped and its
        connection cut (the server did the work; the client never hears of it)."""
        self._drop_marker = marker

    # --- life ---------------------------------------------------------------------------------

    def start(self) -> TcpProxy:
        self._thread.start()
        self._ready.wait(5)
        return self

    def stop(self) -> None:
        async def close_all() -> None:
            self._server.close()
            for link in self._links:
                link.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._loop.stop()

        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(close_all(), self._loop)
        self._thread.join(5)

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _call(self, fn):  # type: ignore[no-untyped-def]
        done = threading.Event()
        result: list[object] = []

        def run() -> None:
            result.append(fn())
            done.set()

        self._loop.call_soon_threadsafe(run)
        done.wait(5)
        return result[0]

    def _stall_existing(self) -> int:
        count = 0
        for link in self._links:
            if not link.stalled.is_set():
                link.stalled.set()
                count += 1
        return count

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def serve() -> None:
            self._server = await asyncio.start_server(self._accept, self.host, self.port)
            self._ready.set()

        self._loop.run_until_complete(serve())
        self._loop.run_forever()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        except OSError:
            writer.transport.abort()
            return
        link = _Link(writer, up_writer)
        if self._stall_new:
            link.stalled.set()
        self._links.append(link)
        await asyncio.gather(
            self._pump(link, reader, up_writer, upstream=True),
            self._pump(link, up_reader, writer, upstream=False),
            return_exceptions=True,
        )

    async def _pump(
        self,
        link: _Link,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        upstream: bool,
    ) -> None:
        while True:
            if link.stalled.is_set():
                await asyncio.Event().wait()  # silent for good; the socket stays open
            read = asyncio.ensure_future(source.read(65536))
            stall = asyncio.ensure_future(link.stalled.wait())
            await asyncio.wait({read, stall}, return_when=asyncio.FIRST_COMPLETED)
            stall.cancel()
            if not read.done():
                read.cancel()
                continue  # stalled while waiting: whatever comes next is swallowed
            data = read.result()
            if not data:
                link.close()
                return
            if link.stalled.is_set():
                continue
            if upstream and self._cut_marker is not None and self._cut_marker in data:
                self._cut_marker = None
                link.muted = True
                sink.write(data)
                await sink.drain()
                await asyncio.sleep(0.05)  # the server runs the command
                self.cuts += 1
                link.close()
                return
            if not upstream and link.muted:
                continue
            if not upstream and self._drop_marker is not None and self._drop_marker in data:
                self._drop_marker = None
                self.cuts += 1
                link.close()
                return
            sink.write(data)
            await sink.drain()
