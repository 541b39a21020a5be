"""The request ids clients cancelled, heard on the fleet's cancel channel.

Gateways set a request's cancel key and publish ``<model>\\x00<request id>`` on
``keys.cancel_channel()``. Each worker keeps what it hears for a while, so that a batch about to
run drops its cancelled requests without a round trip to Redis; each scheduler keeps it too and
takes a cancelled request out of its queue at once (``scheduler.queueing.cancels``). Pub/sub loses
what is sent while the subscription is down: a worker asks about a request enqueued before the
current subscription began (at start, or after a reconnect) with an MGET of its key instead
(``workers.batches.cancel_check``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import redis.asyncio as aioredis

from shared.runtime import redis_conn, subscription
from shared.wire import keys

log = logging.getLogger(__name__)

# How long a heard cancellation is kept: longer than any request waits for a worker.
KEEP_S = 600.0
_NEVER = float("inf")


class CancelledRequests:
    def __init__(self) -> None:
        self._ids: dict[str, float] = {}
        # Wall-clock ms since when every cancellation was heard (inf: not listening).
        self.listening_since_ms = _NEVER
        self._next_prune = 0.0

    def add(self, request_id: str) -> None:
        now = time.monotonic()
        self._ids[request_id] = now + KEEP_S
        if now >= self._next_prune:
            self._next_prune = now + 10.0
            self._ids = {i: until for i, until in self._ids.items() if until > now}

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._ids

    def heard_all_since(self, enqueued_ms: int) -> bool:
        """Whether a cancellation of a request enqueued then would have been heard."""
        return enqueued_ms >= self.listening_since_ms


async def follow(
    redis_url: str,
    cancelled: CancelledRequests,
    on_heard: Callable[[str, str], None] | None = None,
    name: str = "conch-worker-cancels",
) -> None:
    """Listen until cancelled, resubscribing after a lost connection; ``on_heard(model,
    request_id)`` is called for each cancellation heard."""
    while True:
        client: aioredis.Redis = redis_conn.dedicated(redis_url, name=name)
        try:
            pubsub = await redis_conn.pubsub(client)  # a cluster client learns its nodes first
            await pubsub.subscribe(keys.cancel_channel())
            cancelled.listening_since_ms = time.time() * 1000
            async for message in subscription.published(pubsub):
                data = message.get("data")
                text = data.decode() if isinstance(data, bytes) else str(data)
                model, _, request_id = text.partition("\x00")
                cancelled.add(request_id)
                if on_heard is not None:
                    on_heard(model, request_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.debug("cancel listener reconnecting", extra={"error": str(exc)})
            await asyncio.sleep(0.5)
        finally:
            cancelled.listening_since_ms = _NEVER
            await client.aclose()
