"""Free loopback ports for the processes that `conch up`, the benchmarks and the tests start."""

from __future__ import annotations

import errno
import random
import socket
from collections import deque
from pathlib import Path

# Ports this process handed out lately: a caller that chooses many at once (a cluster's 12
# nodes, two ports each) binds none of them until all are chosen.
_RECENT: deque[int] = deque(maxlen=256)
# How many ports below the kernel's ephemeral range are drawn from.
_BELOW_EPHEMERAL = 12_000
_LOWEST = 10_000


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default range is 32768-60999


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def _kernel_choice(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (the caller binds it soon after), and that this
    process has not handed out lately.

    Drawn below the kernel's ephemeral range where there is room: ``bind(host, 0)`` hands out a
    port from that range, the same range every outgoing connection takes its local port from,
    so a port chosen that way could be taken by any client's connect (this process's own
    included) before the server binds it.
    """
    top = _ephemeral_start()
    bottom = max(_LOWEST, top - _BELOW_EPHEMERAL)
    for _ in range(64):
        port = random.randrange(bottom, top) if top - bottom >= 1000 else _kernel_choice(host)
        if port not in _RECENT and _bindable(host, port):
            break
    else:
        port = _kernel_choice(host)
    _RECENT.append(port)
    return port


# Starts of a server whose freshly chosen port was taken before it bound it.
PORT_RACE_RETRIES = 5

# What redis-server (and Valkey) log when their port was taken between ``free_port`` and
# their own bind: another process on the machine took it meanwhile (CI runs other suites).
_BIND_FAILED = "Address already in use"


def lost_port_race(log_tail: str) -> bool:
    """Whether a child that exited at start did so because its free port was taken meanwhile."""
    return _BIND_FAILED in log_tail
