"""Free loopback ports for the processes that `conch up`, the benchmarks and the tests start."""

from __future__ import annotations

import socket
from collections import deque

# Ports this process handed out lately. The kernel may give a released port again to the next
# ``bind(0)``, and a caller that chooses many at once (a cluster's 12 nodes, two ports each)
# binds none of them until all are chosen.
_RECENT: deque[int] = deque(maxlen=256)


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (the caller binds it soon after), and that this
    process has not handed out lately."""
    for _ in range(64):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if port not in _RECENT:
            break
    _RECENT.append(port)
    return port


# What redis-server (and Valkey) log when their port was taken between ``free_port`` and
# their own bind: another process on the machine took it meanwhile (CI runs other suites).
_BIND_FAILED = "Address already in use"


def lost_port_race(log_tail: str) -> bool:
    """Whether a child that exited at start did so because its free port was taken meanwhile."""
    return _BIND_FAILED in log_tail
