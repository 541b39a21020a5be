"""A TCP forwarder that delays every chunk by a one-way latency, in each direction: a network
hop's delay where the kernel's ``tc netem`` is missing (the lab's hosts, ``tests.netns_lab``).

``python -m tests.delay_proxy LISTEN_HOST:PORT TARGET_HOST:PORT DELAY_FILE``; the delay in
milliseconds is read from DELAY_FILE (re-read when it changes), so one run can step through
several delays. Order is kept: a chunk is written no earlier than its arrival plus the delay,
and never before the chunks that arrived before it. Bandwidth is not limited.

Threads, not an event loop: a sub-millisecond delay needs ``nanosleep``'s precision (about
0.1 ms), and event loops round their timers to the millisecond. Per connection and direction,
one thread reads and stamps each chunk, another sleeps until its time and writes it.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import sys
import threading
import time
from pathlib import Path


class Delay:
    def __init__(self, path: Path):
        self.path = path
        self.seconds = 0.0
        threading.Thread(target=self._follow, daemon=True).start()

    def _follow(self) -> None:
        mtime = 0.0
        while True:
            with contextlib.suppress(OSError, ValueError):
                now = self.path.stat().st_mtime
                if now != mtime:
                    mtime = now
                    self.seconds = float(self.path.read_text().strip() or 0) / 1000
            time.sleep(0.1)


def _pump(source: socket.socket, sink: socket.socket, delay: Delay) -> None:
    chunks: queue.SimpleQueue[tuple[float, bytes]] = queue.SimpleQueue()

    def send() -> None:
        while True:
            due, data = chunks.get()
            if not data:
                break
            while (wait := due - time.monotonic()) > 0:
                time.sleep(wait)
            try:
                sink.sendall(data)
            except OSError:
                break
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        while data := source.recv(1 << 16):
            chunks.put((time.monotonic() + delay.seconds, data))
    except OSError:
        pass
    finally:
        chunks.put((0.0, b""))
        sender.join()


def _serve(client: socket.socket, target: tuple[str, int], delay: Delay) -> None:
    try:
        upstream = socket.create_connection(target)
    except OSError:
        client.close()
        return
    for end in (client, upstream):
        end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    back = threading.Thread(target=_pump, args=(upstream, client, delay), daemon=True)
    back.start()
    _pump(client, upstream, delay)
    back.join()
    client.close()
    upstream.close()


def main(listen: str, target: str, delay_file: str) -> None:
    delay = Delay(Path(delay_file))
    host, _, port = listen.rpartition(":")
    target_host, _, target_port = target.rpartition(":")
    server = socket.create_server((host, int(port)), backlog=1024, reuse_port=False)
    print(f"delay proxy {listen} -> {target}", flush=True)
    while True:
        client, _ = server.accept()
        threading.Thread(
            target=_serve, args=(client, (target_host, int(target_port)), delay), daemon=True
        ).start()


if __name__ == "__main__":
    main(*sys.argv[1:4])
