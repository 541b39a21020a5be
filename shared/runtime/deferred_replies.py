"""A heartbeat's pipeline sent now, its replies read at the next beat.

A heartbeat is a write whose replies say only that it landed. Reading them as they arrive costs
the sender a second wake-up per beat (it sleeps until Redis answers, and the answer wakes it);
a period later they have long been in the socket's buffer, and reading them then, in the same
wake that sends the next beat, costs nothing. At most one beat is in flight: the next is sent
only after the previous one's replies are read, so a failed beat is known (and counted) one
period late but never missed, and whoever must know that no beat is still travelling (a
service that stops announcing a version, or deregisters) reads them first (``settle``).

Single Redis only: a cluster client's pipeline is split across nodes; callers keep the plain
pipeline there. The connection is redis-py's own (its handshake, auth, TLS, reconnects); the
replies this reads are one line each (integers, statuses, errors), which ``replies_ready``
relies on.
"""

from __future__ import annotations

import select
import socket
import ssl
from typing import Any

import redis


class DeferredPipeline:
    def __init__(self, connection: redis.Connection):
        # A connection of its own (``redis_conn.sync_client(..., single_connection=False)``'s
        # ``make_connection()``), connected on first use.
        self._conn: Any = connection
        self._pending = 0

    @property
    def pending(self) -> int:
        """Replies still to read (those of the beat in flight)."""
        return self._pending

    @property
    def connected(self) -> bool:
        return self._conn._sock is not None

    def connect(self) -> None:
        """Connect now (blocking: an event loop calls it on a thread)."""
        if not self.connected:
            self._conn.connect()

    def send(self, commands: list[tuple[Any, ...]]) -> None:
        """Send a beat; its replies are read by the next ``settle``. Connects when not
        connected (blocking: an event loop connects first with ``connect``)."""
        if self._pending:
            raise RuntimeError("the previous beat's replies are unread")
        if not commands:
            return
        # No health check: its PING would read this beat's replies as its own.
        self._conn.send_packed_command(self._conn.pack_commands(commands), check_health=False)
        self._pending = len(commands)

    def replies_ready(self) -> bool:
        """Whether every reply of the beat in flight is already in the socket's buffer, so that
        ``settle`` will not block (False on TLS, whose bytes cannot be counted)."""
        if not self._pending:
            return True
        sock = self._conn._sock
        if sock is None:
            return True  # nothing to wait for: settle reports the lost connection
        if isinstance(sock, ssl.SSLSocket):
            return False  # its bytes cannot be counted
        # A socket with a timeout (redis-py's always has one) waits up to that timeout for data
        # before any recv, MSG_DONTWAIT or not: on an event loop that is a frozen process. The
        # poll answers at once; a readable socket's peek then returns at once too.
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        if not poller.poll(0):
            return False
        try:
            data = sock.recv(65536, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False
        except OSError:
            return True  # settle reads the error
        return not data or data.count(b"\r\n") >= self._pending

    def settle(self) -> bool:
        """Read the replies of the beat in flight (blocking, bounded by the socket timeout).
        True when a beat was in flight and landed, False when none was; raises what the beat
        met (a command's error after all its replies are read, or the connection's, which
        drops the connection: the next ``send`` connects again)."""
        count, self._pending = self._pending, 0
        if not count:
            return False
        if self._conn._sock is None:
            raise redis.ConnectionError("the heartbeat's connection was lost before its replies")
        failure: redis.ResponseError | None = None
        for _ in range(count):
            try:
                self._conn.read_response()
            except redis.ResponseError as e:
                failure = failure or e
        if failure is not None:
            raise failure
        return True

    def close(self) -> None:
        self._pending = 0
        self._conn.disconnect()


def commands_of(pipe: Any) -> list[tuple[Any, ...]]:
    """The commands queued on a (synchronous, unexecuted) pipeline."""
    return [args for args, _options in pipe.command_stack]
