"""The published messages of a subscription, with a bound on how long it may stay silent.

redis-py's ``PubSub.listen()`` reads with no timeout at all (the client's socket timeout does not
apply to it): a Redis that keeps the connection open and stops answering (frozen, or a proxy that
holds the client's side open across a failover) leaves a listener waiting for good while its
process believes it is subscribed. A cancel listener in that state lets cancelled requests run,
a log-settings follower misses every change. TCP keepalive only finds a vanished host.

So a subscription that has been quiet for ``quiet_s`` is asked a ``PING`` (answered in
subscribed mode too), and one that answers nothing within ``answer_s`` more is declared lost:
the iterator raises ``redis.ConnectionError`` and the caller's loop subscribes again, as after
any lost connection. Anything read proves the link, health-check answers included. A quiet mesh
pays one probe every two minutes per subscription.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import redis

from shared.runtime.redis_conn import SOCKET_TIMEOUT_S

QUIET_S = 120.0
ANSWER_S = SOCKET_TIMEOUT_S
_PUBLISHED = frozenset({"message", "pmessage", "smessage"})


async def published(
    pubsub: Any, *, quiet_s: float | None = None, answer_s: float | None = None
) -> AsyncIterator[dict[str, Any]]:
    """Each published message (``message``, ``pmessage``, ``smessage``) of ``pubsub``, already
    subscribed; raises ``redis.ConnectionError`` once a probe goes unanswered. The bounds
    default to ``QUIET_S`` and ``ANSWER_S`` as they are when the iteration starts."""
    quiet_s = QUIET_S if quiet_s is None else quiet_s
    answer_s = ANSWER_S if answer_s is None else answer_s
    loop = asyncio.get_running_loop()
    probed = False
    while True:
        timeout = answer_s if probed else quiet_s
        waited_from = loop.time()
        message = await pubsub.get_message(timeout=timeout)
        if message is None and loop.time() - waited_from >= timeout:
            if probed:
                raise redis.ConnectionError(
                    f"subscription silent: no answer to a PING within {answer_s:g} s"
                )
            await pubsub.ping()
            probed = True
            continue
        # Anything read ends the probe: a message, a PING's answer, or a health check's answer
        # (which redis-py swallows, returning None before the timeout).
        probed = False
        if message is not None and message.get("type") in _PUBLISHED:
            yield message
