"""The floor of one message hop on this machine: loopback TCP against a Unix socket.

    python -m bench.transport [--round-trips 5000]

Two processes ping-pong 200-byte messages, as a service and Redis do; printed per round trip:
the wall time and the CPU time of both processes together. Why the private Redis of
``conch up`` listens on a Unix socket (``docs/performance.md``).
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import tempfile
import time
from pathlib import Path

MESSAGE = b"x" * 200


def _pair(kind: str, directory: str) -> tuple[socket.socket, tuple[str, int] | str]:
    if kind == "tcp":
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        host, port = listener.getsockname()
        return listener, (host, port)
    path = str(Path(directory, f"{kind}.sock"))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen()
    return listener, path


def _no_delay(sock: socket.socket) -> None:
    if sock.family == socket.AF_INET:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measure(kind: str, round_trips: int) -> tuple[float, float]:
    """(wall us, CPU us of both sides) per round trip."""
    with tempfile.TemporaryDirectory(prefix="conch-transport-") as directory:
        listener, address = _pair(kind, directory)
        child = os.fork()
        if child == 0:  # the echoing side
            peer, _ = listener.accept()
            _no_delay(peer)
            for _ in range(round_trips):
                peer.recv(4096)
                peer.sendall(MESSAGE)
            os._exit(0)
        client = socket.socket(listener.family, socket.SOCK_STREAM)
        client.connect(address)
        _no_delay(client)
        cpu_before = _cpu_s()
        started = time.perf_counter()
        for _ in range(round_trips):
            client.sendall(MESSAGE)
            client.recv(4096)
        wall = time.perf_counter() - started
        os.waitpid(child, 0)
        cpu = _cpu_s() - cpu_before
        client.close()
        listener.close()
    return wall / round_trips * 1e6, cpu / round_trips * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--round-trips", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("| transport | round trip (us) | CPU per round trip, both sides (us) |")
    print("|---|---:|---:|")
    for _ in range(args.repeat):
        for kind in ("tcp", "unix"):
            wall, cpu = measure(kind, args.round_trips)
            print(f"| {kind} | {wall:.1f} | {cpu:.1f} |", flush=True)


if __name__ == "__main__":
    main()
