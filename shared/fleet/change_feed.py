"""The fleet's change feed: one pub/sub channel on which every writer of rarely-changing state
(model registry and readiness, repository index and load errors, tenants, traffic policy, trace
settings) says what changed, so that the processes that cache that state re-read it at once
instead of polling it on a short interval.

A notice is only a hint: the state itself stays in Redis and is re-read from there. A notice can
be lost (a Redis restart, a subscriber reconnecting, a publisher whose PUBLISH failed), so each
process also re-reads everything on every (re)subscription and on a slow safety poll.

Each process runs one ``ChangeFeed``: one subscription, one task that drives every refresh of
the process (one timer per process, not one per cache), so an idle process wakes once per
safety poll. Classic pub/sub reaches every node of a Redis Cluster; the channel carries the
``{fleet}`` tag like the keys it announces.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis

from shared.runtime import redis_conn, subscription, ticks
from shared.wire import keys

log = logging.getLogger(__name__)

# Topics: what a notice says changed.
MODELS = "models"  # configs, readiness sets (a version newly ready), repository index, load errors
POLICY = "policy"  # weights, shadow traffic, draining versions
TENANTS = "tenants"  # tenants and their API keys
TRACE = "trace"  # trace settings
DEMAND = "demand"  # a model asked for and not loaded (on_demand mode): the placer looks now
TOPICS = (MODELS, POLICY, TENANTS, TRACE, DEMAND)

# After a failed refresh: try again this soon (Redis coming back), not at the next safety poll.
RETRY_S = 0.5
# A notice may name what changed in a topic: ``models@m0634``. A process that can re-read one
# model (``ChangeFeed.on_names``) re-reads just it; any other takes it as its topic's notice.
# A fleet of thousands of models loads and unloads many times a second (on_demand mode): a
# re-read of every model at each would cost every gateway and scheduler O(models) per load.
NAMED = "@"


def named(topic: str, name: str) -> str:
    """The notice that ``name`` changed within ``topic``."""
    return f"{topic}{NAMED}{name}"


def channel() -> str:
    return keys.changes_channel()


def _payload(topics: tuple[str, ...]) -> str:
    return ",".join(topics)


async def announce(r: Any, *topics: str) -> None:
    """Tell every process that ``topics`` changed, after the writes it names succeeded (not
    inside their pipeline: a cluster pipeline refuses PUBLISH). Never raises: a lost notice
    costs at most one safety poll of delay, and the state it announces is already written."""
    try:
        await r.publish(channel(), _payload(topics))
    except Exception as exc:  # the safety poll covers it
        log.warning("change notice not sent", extra={"topics": topics, "error": str(exc)})


Refresh = Callable[[], Awaitable[object]]
RefreshNames = Callable[[set[str]], Awaitable[object]]


class ChangeFeed:
    """One subscription and one refresh driver for a process."""

    def __init__(self, redis_url: str, safety_poll_s: float, name: str = "conch-change-feed"):
        self._url = redis_url
        self.safety_poll_s = safety_poll_s
        self._name = name
        self._refreshers: dict[str, list[Refresh]] = {}
        self._pending: set[str] = set()
        # topic -> re-read of the named things only; topic -> names noticed since the last one.
        self._name_refreshers: dict[str, RefreshNames] = {}
        self._names: dict[str, set[str]] = {}
        self._wake = asyncio.Event()
        self.subscribed = asyncio.Event()
        self.notices = 0  # notices received (tests and metrics read it)
        self._later: asyncio.TimerHandle | None = None

    def on(self, topic: str, refresh: Refresh) -> None:
        """Run ``refresh`` when ``topic`` changes, on every (re)subscription and every poll."""
        self._refreshers.setdefault(topic, []).append(refresh)
        self._pending.add(topic)

    def on_names(self, topic: str, refresh: RefreshNames) -> None:
        """Run ``refresh(names)`` for notices that name what changed in ``topic`` (a topic
        also registered with ``on``: a notice without names, a (re)subscription and the poll
        still re-read everything)."""
        self._name_refreshers[topic] = refresh

    def kick(self, *topics: str) -> None:
        """Refresh these topics soon, without waiting for a notice (a local hint)."""
        self._pending.update(topics or tuple(self._refreshers))
        self._wake.set()

    def kick_after(self, delay_s: float, *topics: str) -> None:
        """Refresh these topics in ``delay_s`` (a state that will change by itself: a delay
        running out), on the same driver."""
        handle, now = self._later, asyncio.get_running_loop().time()
        if handle is not None and now < handle.when() <= now + delay_s:
            return  # one already due sooner: it refreshes these too
        if handle is not None:
            handle.cancel()
        self._later = asyncio.get_running_loop().call_later(delay_s, self.kick, *topics)

    async def run(self) -> None:
        """Listen and refresh until cancelled."""
        listener = asyncio.create_task(self._listen(), name="change-feed-listen")
        try:
            await self._drive()
        finally:
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)

    async def _drive(self) -> None:
        loop = asyncio.get_running_loop()
        # Polls fall on the process's shared boundaries (``shared.runtime.ticks``): one wake with
        # the rest.
        next_poll = self._next_poll(loop)
        while True:
            now = loop.time()
            if now >= next_poll - 0.002:
                self._pending.update(self._refreshers)
                next_poll = self._next_poll(loop)
            due, self._pending = self._pending, set()
            names = {t: n for t, n in self._names.items() if t not in due}  # a full one covers
            self._names = {}
            self._wake.clear()
            failed = await self._refresh(due) | await self._refresh_names(names)
            wait_s = next_poll - loop.time()
            if failed:
                self._pending |= failed
                wait_s = min(wait_s, RETRY_S)
            if self._pending or self._names:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=max(wait_s, 0.0))

    def _next_poll(self, loop: asyncio.AbstractEventLoop) -> float:
        """The next boundary at least half a period away (``shared.runtime.ticks``)."""
        now, period = loop.time(), self.safety_poll_s
        due = now + ticks.until_boundary(period, loop)
        return due + period if due - now < period / 2 else due

    async def _refresh(self, due: set[str]) -> set[str]:
        """Every due topic's refreshers at once: their round trips overlap, so a safety poll
        wakes the process (and Redis) about as often as its longest refresh, not their sum.
        One topic's refreshers stay in order."""
        topics = sorted(due)
        results = await asyncio.gather(*(self._refresh_topic(topic) for topic in topics))
        return {topic for topic, ok in zip(topics, results, strict=True) if not ok}

    async def _refresh_names(self, names: dict[str, set[str]]) -> set[str]:
        """The named re-reads; a failed one becomes its topic's full re-read."""
        failed: set[str] = set()
        for topic, which in names.items():
            try:
                await self._name_refreshers[topic](which)
            except asyncio.CancelledError:
                raise
            except Exception:
                failed.add(topic)
                log.exception("refresh failed", extra={"what": topic, "names": sorted(which)})
        return failed

    async def _refresh_topic(self, topic: str) -> bool:
        ok = True
        for refresh in self._refreshers.get(topic, []):
            try:
                await refresh()
            except asyncio.CancelledError:
                raise
            except Exception:
                ok = False
                log.exception("refresh failed", extra={"what": topic})
        return ok

    def _notice(self, text: str) -> None:
        topics: list[str] = []
        for token in text.split(","):
            topic, _, name = token.partition(NAMED)
            if topic not in self._refreshers:
                continue
            if name and topic in self._name_refreshers:
                self._names.setdefault(topic, set()).add(name)
                self._wake.set()
            else:
                topics.append(topic)
        if topics:
            self.kick(*topics)

    async def _listen(self) -> None:
        while True:
            client: aioredis.Redis = redis_conn.dedicated(self._url, name=self._name)
            try:
                pubsub = await redis_conn.pubsub(client)
                await pubsub.subscribe(channel())
                # Whatever changed while unsubscribed: re-read everything once subscribed.
                self.kick()
                self.subscribed.set()
                async for message in subscription.published(pubsub):
                    self.notices += 1
                    data = message.get("data") or b""
                    text = data.decode() if isinstance(data, bytes) else str(data)
                    self._notice(text)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.info("change feed reconnecting", extra={"error": str(exc)})
                self.subscribed.clear()
                await asyncio.sleep(RETRY_S)
            finally:
                await client.aclose()
