"""A TCP proxy between the mesh and Redis that the chaos suite can stall or cut half-open.

    python -m tests.chaos.tcp_proxy LISTEN_PORT UPSTREAM_PORT

It runs as its own process (its timing does not depend on the test's), forwards bytes both ways,
and obeys lines on its standard input, answering each with one line on standard output:

    stall SECONDS    forward nothing (existing or new connections) for SECONDS, then resume:
                     Redis as a stalled server looks from the network (accepts, answers nothing)
    halfopen NAME    every connection whose client announced NAME (CLIENT SETNAME / HELLO) goes
                     half-open: the Redis side is closed, the client's side stays open, what the
                     client sends is swallowed and nothing comes back, ever (no FIN, no RST)
    count            the number of connections open now

Loopback only; it stops when its standard input closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys

NAME_WINDOW = 4096  # bytes of a connection's start searched for its client name


class Connection:
    def __init__(self) -> None:
        self.seen = bytearray()
        self.blackholed = False
        self.upstream: asyncio.StreamWriter | None = None


class Proxy:
    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.connections: set[Connection] = set()
        self.stall_task: asyncio.Task[None] | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection()
        self.connections.add(conn)
        try:
            await self.flowing.wait()
            try:
                up_reader, up_writer = await asyncio.open_connection(
                    "127.0.0.1", self.upstream_port
                )
            except OSError:
                return  # Redis is down: the client sees its connection closed
            conn.upstream = up_writer
            await asyncio.gather(
                self.pump(reader, up_writer, conn, from_client=True),
                self.pump(up_reader, writer, conn, from_client=False),
                return_exceptions=True,
            )
        finally:
            self.connections.discard(conn)
            if not conn.blackholed:
                with contextlib.suppress(Exception):
                    writer.close()
            else:  # half-open: keep the client's socket until the client itself closes it
                with contextlib.suppress(Exception):
                    while await reader.read(65536):
                        pass
                    writer.close()
            if conn.upstream is not None:
                with contextlib.suppress(Exception):
                    conn.upstream.close()

    async def pump(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        conn: Connection,
        from_client: bool,
    ) -> None:
        while True:
            data = await source.read(65536)
            if not data:
                break
            if from_client and len(conn.seen) < NAME_WINDOW:
                conn.seen += data[: NAME_WINDOW - len(conn.seen)]
            await self.flowing.wait()
            if conn.blackholed:
                if from_client:
                    continue  # swallowed
                break
            sink.write(data)
            await sink.drain()
        if not conn.blackholed:
            with contextlib.suppress(Exception):
                sink.close()

    async def stall(self, seconds: float) -> None:
        self.flowing.clear()
        try:
            await asyncio.sleep(seconds)
        finally:
            self.flowing.set()

    def halfopen(self, name: str) -> int:
        hit = 0
        for conn in list(self.connections):
            if name.encode() in conn.seen and not conn.blackholed:
                conn.blackholed = True
                hit += 1
                if conn.upstream is not None:
                    conn.upstream.close()
        return hit


async def main(listen_port: int, upstream_port: int) -> None:
    proxy = Proxy(upstream_port)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", listen_port, backlog=512)
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    print(f"listening {listen_port}", flush=True)
    async with server:
        while line := await stdin.readline():
            command, _, argument = line.decode().strip().partition(" ")
            if command == "stall":
                proxy.stall_task = asyncio.create_task(proxy.stall(float(argument)))
                print("ok stall", flush=True)
            elif command == "halfopen":
                print(f"ok halfopen {proxy.halfopen(argument)}", flush=True)
            elif command == "count":
                print(f"ok count {len(proxy.connections)}", flush=True)
            else:
                print(f"error unknown command {command!r}", flush=True)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
