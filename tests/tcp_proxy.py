"""The tests' one TCP proxy: it forwards bytes both ways between its listener and an upstream
(Redis, a gateway, Envoy), and a test can make it misbehave.

What it can do, and who uses it:

- pass-through (the default): a hop between a client and a server, nothing more;
- ``delay_ms`` / ``delay_file``: every chunk is delayed by a one-way latency in each direction,
  order kept (a chunk is written no earlier than its arrival plus the delay, never before the
  chunks that came before it; bandwidth is not limited). A network hop's delay where the
  kernel's ``tc netem`` is missing (``tests.netns_mesh``) or a slow link to Redis
  (``tests/integration/test_deferred_heartbeats.py``). ``delay_file`` holds milliseconds and is
  re-read when it changes (every 100 ms), so one run can step through several delays;
- ``stall_existing`` / ``stall_all``: connections go silent both ways for good while their
  sockets stay open (half-open: the peer stops answering), a Redis that stopped answering
  (``tests/integration``);
- ``stall_for``: nothing is forwarded on any connection, existing or new, for some seconds, then
  everything resumes: Redis frozen for a while as the network sees it (the chaos suite);
- ``halfopen``: every connection whose client announced a name (CLIENT SETNAME / HELLO, in its
  first 4 KiB) loses its upstream side while its client side stays open and silent, with no FIN
  and no RST, ever (the chaos suite);
- ``cut_after`` / ``drop_reply_containing``: once, cut a connection right after a command went
  upstream, before its reply came back, or drop the reply that contains a marker (what makes a
  client library retry a write; ``tests/integration``);
- counters: ``connections`` (accepted so far), ``cuts`` (connections cut by the two above),
  ``open_count()`` (open now), ``bytes_up`` / ``bytes_down`` (bytes read from the clients / from
  the upstream, all connections together: what crossed the wire, e.g. compressed or not).

Threads, not an event loop: a sub-millisecond delay needs ``nanosleep``'s precision (about
0.1 ms), and event loops round their timers to the millisecond. Per connection and direction one
thread reads; with a delay, another sleeps until each chunk is due and writes it.

In a test's process: ``with TcpProxy(host, port) as proxy:`` (or ``TcpProxy.to_redis(server)``).
As a process of its own (its timing then does not depend on the test's)::

    python -m tests.tcp_proxy [HOST:]LISTEN [HOST:]UPSTREAM [--delay-file PATH] [--control]

With ``--control`` it obeys lines on its standard input, answering each with one line, and stops
when its standard input closes: ``stall SECONDS`` (``stall_for``), ``halfopen NAME``
(``halfopen``), ``count`` (``open_count()``). Without it, it serves until killed. Its first line
on standard output starts with ``listening``.
"""

from __future__ import annotations

import argparse
import contextlib
import queue
import socket
import struct
import sys
import threading
import time
from pathlib import Path

from conch.ports import free_port
from conch.private_redis import PrivateRedis

NAME_WINDOW = 4096  # bytes of a connection's start searched for its client name


class _Link:
    def __init__(self, client: socket.socket, upstream: socket.socket):
        self.client = client
        self.upstream = upstream
        self.seen = bytearray()
        # Set: nothing more is forwarded either way (the sockets stay open).
        self.stalled = threading.Event()
        # Set: the link is gone (cut, stopped or closed by both ends).
        self.closed = threading.Event()
        # The server's answers are dropped (the link is about to be cut).
        self.muted = False
        # Half-open: upstream closed, the client's side kept open and silent.
        self.blackholed = False

    def abort(self) -> None:
        """Reset both sides (RST), waking whatever thread reads them."""
        self.closed.set()
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.shutdown(socket.SHUT_RD)  # wakes a blocked recv; sends nothing
            with contextlib.suppress(OSError):
                sock.close()

    def drop_upstream(self) -> None:
        """Close the server's side (FIN) and nothing else."""
        with contextlib.suppress(OSError):
            self.upstream.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.upstream.close()


class _Delay:
    """The one-way delay, fixed or followed in a file of milliseconds."""

    def __init__(self, ms: float, path: Path | None):
        self.seconds = ms / 1000
        self.path = path
        if path is not None:
            threading.Thread(target=self._follow, daemon=True, name="tcp-proxy-delay").start()

    def _follow(self) -> None:
        assert self.path is not None
        mtime = 0.0
        while True:
            with contextlib.suppress(OSError, ValueError):
                now = self.path.stat().st_mtime
                if now != mtime:
                    mtime = now
                    self.seconds = float(self.path.read_text().strip() or 0) / 1000
            time.sleep(0.1)


class TcpProxy:
    def __init__(
        self,
        upstream_host: str,
        upstream_port: int,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        delay_ms: float = 0.0,
        delay_file: Path | None = None,
    ):
        self.host = host
        self.port = port if port is not None else free_port()
        self._upstream = (upstream_host, upstream_port)
        self._delayed = delay_ms > 0 or delay_file is not None
        self._delay = _Delay(delay_ms, delay_file) if self._delayed else None
        self._links: list[_Link] = []
        self._lock = threading.Lock()
        self._stall_new = False
        self._flowing = threading.Event()
        self._flowing.set()
        self._cut_marker: bytes | None = None
        self._drop_marker: bytes | None = None
        self._server: socket.socket | None = None
        self.cuts = 0
        self.connections = 0
        self.bytes_up = 0
        self.bytes_down = 0

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
        count = 0
        with self._lock:
            for link in self._links:
                if not link.stalled.is_set():
                    link.stalled.set()
                    count += 1
        return count

    def stall_all(self, stalled: bool = True) -> None:
        """Stall open connections and every new one (a Redis that stopped answering), or stop
        stalling new ones (open stalled connections stay stalled)."""
        self._stall_new = stalled
        if stalled:
            self.stall_existing()

    def stall_for(self, seconds: float) -> None:
        """Forward nothing, on existing or new connections, for ``seconds``, then resume (in the
        background: this returns at once)."""
        self._flowing.clear()
        timer = threading.Timer(seconds, self._flowing.set)
        timer.daemon = True
        timer.start()

    def halfopen(self, name: str) -> int:
        """Every connection whose client announced ``name`` goes half-open: its upstream side is
        closed, its client side stays open, what the client sends is swallowed and nothing comes
        back. Returns how many connections it hit."""
        hit = 0
        with self._lock:
            links = list(self._links)
        for link in links:
            if name.encode() in link.seen and not link.blackholed:
                link.blackholed = True
                hit += 1
                link.drop_upstream()
        return hit

    def cut_after(self, marker: bytes) -> None:
        """Once: the next time a client sends bytes containing ``marker``, forward them, then
        cut that connection before any answer reaches the client."""
        self._cut_marker = marker

    def drop_reply_containing(self, marker: bytes) -> None:
        """Once: the next answer from the server containing ``marker`` is dropped and its
        connection cut (the server did the work; the client never hears of it)."""
        self._drop_marker = marker

    def open_count(self) -> int:
        with self._lock:
            return len(self._links)

    # --- life ---------------------------------------------------------------------------------

    def start(self) -> TcpProxy:
        self._server = socket.create_server((self.host, self.port), backlog=1024)
        threading.Thread(target=self._accept_loop, daemon=True, name="tcp-proxy").start()
        return self

    def stop(self) -> None:
        self._flowing.set()
        if self._server is not None:
            with contextlib.suppress(OSError):
                self._server.shutdown(socket.SHUT_RDWR)  # wakes accept()
            with contextlib.suppress(OSError):
                self._server.close()
        with self._lock:
            links = list(self._links)
        for link in links:
            link.abort()

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- forwarding ---------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        assert self._server is not None
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        self._flowing.wait()
        try:
            upstream = socket.create_connection(self._upstream)
        except OSError:
            with contextlib.suppress(OSError):
                client.close()  # the upstream is down: the client sees its connection closed
            return
        for end in (client, upstream):
            end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        link = _Link(client, upstream)
        if self._stall_new:
            link.stalled.set()
        with self._lock:
            self._links.append(link)
        back = threading.Thread(target=self._pump, args=(link, False), daemon=True)
        back.start()
        self._pump(link, True)
        back.join()
        with self._lock:
            if link in self._links:
                self._links.remove(link)
        link.closed.set()
        for sock in (client, upstream):
            with contextlib.suppress(OSError):
                sock.close()

    def _pump(self, link: _Link, from_client: bool) -> None:
        source, sink = (link.client, link.upstream) if from_client else (link.upstream, link.client)
        send, finish = self._sender(sink)
        try:
            while True:
                try:
                    data = source.recv(65536)
                except OSError:
                    data = b""
                if link.stalled.is_set():
                    link.closed.wait()  # silent for good, even a close; the sockets stay open
                    return
                if not data:
                    break
                with self._lock:
                    if from_client:
                        self.bytes_up += len(data)
                    else:
                        self.bytes_down += len(data)
                if from_client and len(link.seen) < NAME_WINDOW:
                    link.seen += data[: NAME_WINDOW - len(link.seen)]
                self._flowing.wait()
                if link.stalled.is_set():
                    link.closed.wait()
                    return
                if link.blackholed:
                    if from_client:
                        continue  # swallowed
                    break
                if from_client and self._take(b"cut", data):
                    link.muted = True
                    with contextlib.suppress(OSError):
                        sink.sendall(data)
                    time.sleep(0.05)  # the server runs the command
                    self.cuts += 1
                    link.abort()
                    return
                if not from_client and link.muted:
                    continue
                if not from_client and self._take(b"drop", data):
                    self.cuts += 1
                    link.abort()
                    return
                if not send(data):
                    break
        finally:
            finish(not (link.blackholed or link.stalled.is_set() or link.closed.is_set()))

    def _take(self, which: bytes, data: bytes) -> bool:
        """Whether ``data`` holds the pending cut (or drop) marker; clears it if so."""
        with self._lock:
            if which == b"cut":
                if self._cut_marker is not None and self._cut_marker in data:
                    self._cut_marker = None
                    return True
            elif self._drop_marker is not None and self._drop_marker in data:
                self._drop_marker = None
                return True
        return False

    def _sender(self, sink: socket.socket):  # type: ignore[no-untyped-def]
        """``send(data) -> ok`` and ``finish(half_close)`` for one direction: straight through,
        or through a thread that writes each chunk when its delay is up."""

        def half_close(wanted: bool) -> None:
            if wanted:
                with contextlib.suppress(OSError):
                    sink.shutdown(socket.SHUT_WR)

        if self._delay is None:

            def send_now(data: bytes) -> bool:
                try:
                    sink.sendall(data)
                except OSError:
                    return False
                return True

            return send_now, half_close

        delay = self._delay
        chunks: queue.SimpleQueue[tuple[float, bytes]] = queue.SimpleQueue()
        failed = threading.Event()

        def write() -> None:
            while True:
                due, data = chunks.get()
                if not data:
                    return
                while (wait := due - time.monotonic()) > 0:
                    time.sleep(wait)
                try:
                    sink.sendall(data)
                except OSError:
                    failed.set()
                    return

        writer = threading.Thread(target=write, daemon=True)
        writer.start()

        def send_later(data: bytes) -> bool:
            chunks.put((time.monotonic() + delay.seconds, data))
            return not failed.is_set()

        def finish(wanted: bool) -> None:
            chunks.put((0.0, b""))
            writer.join()
            half_close(wanted)

        return send_later, finish


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.tcp_proxy")
    parser.add_argument("listen", help="[HOST:]PORT to listen on (HOST: 127.0.0.1)")
    parser.add_argument("upstream", help="[HOST:]PORT to forward to (HOST: 127.0.0.1)")
    parser.add_argument("--delay-file", type=Path, help="one-way delay in ms, re-read")
    parser.add_argument("--control", action="store_true", help="obey commands on stdin")
    args = parser.parse_args(argv)
    (host, port), (up_host, up_port) = _address(args.listen), _address(args.upstream)
    proxy = TcpProxy(up_host, up_port, host=host, port=port, delay_file=args.delay_file)
    proxy.start()
    print(f"listening {host}:{port} -> {up_host}:{up_port}", flush=True)
    if not args.control:
        threading.Event().wait()
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command == "stall":
            proxy.stall_for(float(argument))
            print("ok stall", flush=True)
        elif command == "halfopen":
            print(f"ok halfopen {proxy.halfopen(argument)}", flush=True)
        elif command == "count":
            print(f"ok count {proxy.open_count()}", flush=True)
        else:
            print(f"error unknown command {command!r}", flush=True)
    proxy.stop()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
