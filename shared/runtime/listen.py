"""Listening ports held by one mesh only, and who holds a port when it is taken.

Every port a Conch service listens on is bound without ``SO_REUSEPORT``: with it, the kernel lets
any process of the same user bind the same port and splits the connections between them, so a
second mesh (or an HTTP server and a gRPC server given the same number) would share the port
silently. ``SO_REUSEADDR`` is still set: on Linux it only lets a restarted server bind over the
``TIME_WAIT`` connections of its previous run, never over a live listener.

Processes of one service share a port by inheriting the socket bound here (``bind_listener``).
When a port is taken, :func:`holder` names the process listening on it where ``/proc`` tells.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from pathlib import Path

_TCP_LISTEN = "0A"


class PortError(OSError):
    """A port this service cannot listen on; ``str()`` is the message for the user.

    ``what`` says what the port is for ("HTTP", "gRPC", ...) and ``setting`` the flag or
    environment variable that changes it.
    """

    def __init__(self, port: int, what: str, setting: str, problem: str):
        self.port = port
        self.what = what
        self.setting = setting
        super().__init__(f"port {port} ({what}) {problem}; choose another port with {setting}")


class PortInUse(PortError):
    """A port another process (or another role of this mesh) already holds."""

    def __init__(self, port: int, what: str, setting: str, holder: str | None):
        self.holder = holder
        by = f" by {holder}" if holder else ""
        super().__init__(port, what, setting, f"is already in use{by}")


def port_error(exc: OSError, port: int, what: str, setting: str) -> OSError:
    """The :class:`PortError` for a failed bind or listen (``exc`` itself if it is another)."""
    if exc.errno == errno.EADDRINUSE:
        return PortInUse(port, what, setting, holder(port))
    if exc.errno == errno.EACCES:
        return PortError(port, what, setting, "needs privileges this process lacks")
    if exc.errno == errno.EADDRNOTAVAIL:
        return PortError(port, what, setting, "is on an address this host does not have")
    return exc


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def bind_listener(
    host: str, port: int, what: str, setting: str, backlog: int = 2048
) -> socket.socket:
    """A listening TCP socket on ``host:port`` that no other process can join.

    Raises :class:`PortInUse` (naming the holder where it can be told) when the port is taken,
    :class:`PortError` when it cannot be used for another reason.
    The socket is inheritable: child processes serve it by its file descriptor.
    """
    sock = socket.socket(_family(host), socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise port_error(exc, port, what, setting) from exc
    sock.set_inheritable(True)
    return sock


def check_free(host: str, port: int, what: str, setting: str) -> None:
    """Raise :class:`PortError` if ``host:port`` cannot be bound now (a quick check before a
    launcher starts the process that binds it for good; that bind is exclusive too)."""
    if port <= 0:
        return
    sock = socket.socket(_family(host), socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        raise port_error(exc, port, what, setting) from exc
    finally:
        sock.close()


def holder(port: int, proc: Path = Path("/proc")) -> str | None:
    """``pid N (command line)`` of the process listening on ``port``; None when it cannot be
    told (no /proc, or the socket belongs to another user's process)."""
    inodes = listening_inodes(port, proc)
    if not inodes:
        return None
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (pid_dir / "fd").iterdir():
                with contextlib.suppress(OSError):
                    link = os.readlink(fd)
                    if link.startswith("socket:[") and link[8:-1] in inodes:
                        return f"pid {pid_dir.name} ({_command(pid_dir)})"
    return "another user's process"


def listening_inodes(port: int, proc: Path = Path("/proc")) -> set[str]:
    """Socket inodes in LISTEN state on ``port`` (IPv4 and IPv6), from /proc/net/tcp{,6}."""
    found: set[str] = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            lines = (proc / "net" / table).read_text().splitlines()[1:]
            for line in lines:
                fields = line.split()
                if len(fields) < 10 or fields[3] != _TCP_LISTEN:
                    continue
                if int(fields[1].rsplit(":", 1)[1], 16) == port:
                    found.add(fields[9])
    return found


def _command(pid_dir: Path) -> str:
    try:
        raw = (pid_dir / "cmdline").read_bytes()
    except OSError:
        return "?"
    text = raw.replace(b"\0", b" ").decode(errors="replace").strip()
    return text[:120] + ("…" if len(text) > 120 else "")
