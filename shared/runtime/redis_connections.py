"""The connection classes of every Redis pool here: redis-py's own, with two public methods
overridden and given to a pool through its public ``connection_class`` argument (no private API
of redis-py, so no exact pin: ``tests/unit/test_redis_packing.py`` checks the packing byte for
byte against redis-py's own, so an upgrade that changes it fails a test, not the wire).

- ``pack_command``: commands are packed into RESP by hiredis in C. redis-py 8's asyncio
  connection packs in Python (only its synchronous one uses hiredis); measured with ``timeit``
  on the 2-core VM, per command, redis-py's packing against hiredis': the gateway's admission
  EVALSHA 22-26 against 7-9 us, a worker's XREADGROUP 16-22 against 4-6 us, an XADD 6-7 against
  2-3 us. Worth keeping on a path of a few commands per request.
- ``send_packed_command``: the write is bounded by ``asyncio.timeout`` rather than redis-py's
  ``asyncio.wait_for``, which on Python 3.11 can swallow a cancellation (CPython gh-86296; a
  service that cannot be cancelled cannot stop) and costs a task per command.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import hiredis
from redis.asyncio.connection import (
    AbstractConnection,
    Connection,
    SSLConnection,
    UnixDomainSocketConnection,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError
from redis.exceptions import TimeoutError as RedisTimeoutError

if TYPE_CHECKING:
    # The mixin is checked as the connection it is mixed into; at run time it stays a plain
    # class (its subclasses' MRO, and so every attribute lookup, are as they were).
    _ConnectionBase = AbstractConnection
else:
    _ConnectionBase = object


class _HiredisPacking(_ConnectionBase):
    """Commands packed by hiredis, writes bounded by ``asyncio.timeout``: see the module."""

    # Any: redis-py's EncodableT (the command name a str or bytes), or whatever else a caller
    # passed, which hiredis refuses (DataError) as redis-py's own packing does.
    def pack_command(self, *args: Any) -> list[bytes]:
        if isinstance(args[0], str):
            args = (*args[0].encode().split(), *args[1:])
        elif b" " in args[0]:
            args = (*args[0].split(), *args[1:])
        try:
            return [hiredis.pack_command(args)]
        except TypeError as exc:
            raise DataError(str(exc)) from exc

    async def send_packed_command(
        self, command: bytes | str | Iterable[bytes], check_health: bool = True
    ) -> None:
        """redis-py's own, connected and health-checked as redis-py does it, then the write
        with the connection's socket timeout lifted (so that redis-py writes without
        ``asyncio.wait_for``) and applied around it instead. A connection has one user at a
        time; a pub/sub read beside a write passes its own timeout, so nothing reads the
        lifted value."""
        if not self.is_connected:
            await self.connect_check_health(check_health=False)
        if check_health:
            await self.check_health()  # type: ignore[no-untyped-call]  # redis-py's, unannotated
        bound, self.socket_timeout = self.socket_timeout, None
        try:
            async with asyncio.timeout(bound):
                await super().send_packed_command(command, False)
        except TimeoutError:
            await self.disconnect(nowait=True)
            raise RedisTimeoutError("Timeout writing to socket") from None
        except RuntimeError as exc:
            # uvloop's "unable to perform operation on <TCPTransport closed=True>": the server
            # closed the connection (a failover, a restart) under a write. A connection error,
            # so the callers' retry and 503 paths take it, not an internal error.
            await self.disconnect(nowait=True)
            if "closed" not in str(exc):
                raise
            raise RedisConnectionError(f"Error while writing to socket: {exc}") from exc
        finally:
            self.socket_timeout = bound


class HiredisPackedConnection(_HiredisPacking, Connection):
    """TCP."""


class HiredisPackedUnixConnection(_HiredisPacking, UnixDomainSocketConnection):
    """A Unix socket (``unix://`` URLs: the private Redis of ``conch up``)."""


class HiredisPackedSSLConnection(_HiredisPacking, SSLConnection):
    """TLS (``rediss://`` URLs: managed Redis services)."""


# The packed twin of each of redis-py's connection classes.
PACKED: dict[type[AbstractConnection], type[AbstractConnection]] = {
    Connection: HiredisPackedConnection,
    UnixDomainSocketConnection: HiredisPackedUnixConnection,
    SSLConnection: HiredisPackedSSLConnection,
}
