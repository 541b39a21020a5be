"""Free loopback ports for the processes that `conch up`, the benchmarks and the tests start."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (the caller binds it soon after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
