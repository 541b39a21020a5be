"""The scheduler's intake: one blocking XREADGROUP over every request stream (on Redis Cluster,
one per hash slot, concurrently: ``scheduler.reading.slot_reads``), each entry handed to its
version's queue.

Nothing read is ever left behind: after a failed read (whose answer may have been delivered and
lost), a failed queue step or a failed write, the intake re-reads this scheduler's own pending
entries (``scheduler.reading.own_pending``); an entry it cannot queue is answered and dead-lettered
(``scheduler.queueing.poison``); one of a version no longer served is answered with an error.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Coroutine
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError
from redis.typing import KeyT, StreamIdT

from scheduler.ensemble.runner import EnsembleRunner
from scheduler.queueing import poison
from scheduler.queueing.version_queue import VersionQueue
from scheduler.reading import own_pending
from scheduler.reading.slot_reads import SlotReads
from scheduler.settings import SchedulerSettings
from shared import metrics
from shared.fleet import streams
from shared.runtime import redis_cluster, redis_conn
from shared.runtime.wakeable_read import READ_BLOCK_MS, WakeableRead
from shared.wire import envelope, keys

log = logging.getLogger(__name__)


class Intake:
    def __init__(
        self,
        r: aioredis.Redis,
        settings: SchedulerSettings,
        consumer: str,
        queues: dict[tuple[str, int], VersionQueue | EnsembleRunner],
        stream_keys: dict[bytes, tuple[str, int]],
        changed: asyncio.Event,
    ):
        self.redis = r
        self.settings = settings
        self.id = consumer
        # Shared with the service, which adds and retires queues and their streams.
        self.queues = queues
        self._streams = stream_keys
        self._changed = changed
        # Set after a failed read, step or write: re-read this scheduler's own pending entries.
        self._recover = False
        self._background: set[asyncio.Task[None]] = set()

    def need_recovery(self) -> None:
        self._recover = True

    async def run(self) -> None:
        client: aioredis.Redis = redis_conn.dedicated(
            self.settings.redis_url, name="conch-scheduler-read", block_ms=READ_BLOCK_MS
        )
        # New or retired streams end the read in flight at once (the block itself is long).
        reads = WakeableRead(client, self.redis, fallback_block_ms=250)
        waker = asyncio.create_task(self._wake_on_change(reads), name="intake-wake")
        slot_reads = None
        url = self.settings.redis_url
        if self.settings.read_by_slot or redis_cluster.is_cluster(url):
            slot_pool = redis_conn.blocking_pool(url, name="conch-scheduler-slot-read")
            slot_reads = SlotReads(slot_pool, self.id, self.settings.read_count)
        try:
            while True:
                if not self._streams:
                    self._changed.clear()
                    await self._changed.wait()
                    continue
                if self._recover:
                    await self._recover_own()
                try:
                    reply: Any  # an XREADGROUP reply, for streams.parse_read
                    if slot_reads is not None:
                        reply = await slot_reads.read(list(self._streams))
                        if slot_reads.needs_recovery:
                            slot_reads.needs_recovery = False
                            self._recover = True
                    else:
                        wanted: dict[KeyT, StreamIdT] = {stream: b">" for stream in self._streams}

                        def read_group(wanted: dict[KeyT, StreamIdT] = wanted) -> Awaitable[Any]:
                            return client.xreadgroup(
                                keys.SCHEDULER_GROUP,
                                self.id,
                                wanted,
                                count=self.settings.read_count,
                                block=reads.block_ms,
                            )

                        reply = await reads.read(read_group)
                except asyncio.CancelledError:
                    raise
                except ResponseError as exc:
                    self._recover = True
                    if "NOGROUP" not in str(exc):
                        log.exception("request stream read failed; retrying")
                        await asyncio.sleep(0.2)
                        continue
                    log.warning("request stream groups missing (redis restarted?); recreating")
                    try:
                        await streams.ensure_groups(
                            self.redis, [s.decode() for s in self._streams], keys.SCHEDULER_GROUP
                        )
                    except Exception as error:  # Redis still coming back: the next read retries
                        log.warning("could not recreate groups yet", extra={"error": str(error)})
                        await asyncio.sleep(0.2)
                    continue
                except Exception:
                    # The read may have been delivered with its answer lost: recover it.
                    self._recover = True
                    log.exception("request stream read failed; retrying")
                    await asyncio.sleep(0.2)
                    continue
                for entry in streams.parse_read(reply):
                    self.accept(entry)
                # The work the entries started writes before the next read goes out (an ensemble
                # step's next admission is one write sooner).
                await asyncio.sleep(0)
        finally:
            waker.cancel()
            if slot_reads is not None:
                await slot_reads.close()
            await client.aclose()

    async def _wake_on_change(self, reads: WakeableRead) -> None:
        """The service added or retired streams: the read in flight starts again with them."""
        while True:
            await self._changed.wait()
            self._changed.clear()
            reads.wake()

    async def _recover_own(self) -> None:
        self._recover = False
        try:
            entries = await own_pending.recover(
                self.redis, list(self._streams), self.id, self._holds
            )
        except asyncio.CancelledError:
            raise
        except Exception:
            self._recover = True
            log.exception("could not recover this scheduler's pending entries yet")
            await asyncio.sleep(0.2)
            return
        for entry in entries:
            self.accept(entry)

    def _holds(self, stream: bytes, entry_id: bytes) -> bool:
        key = self._streams.get(stream)
        queue = self.queues.get(key) if key else None
        return queue is not None and queue.holds(stream, entry_id)

    def accept(self, entry: streams.Entry) -> None:
        """One bad entry must not stop the read loop: it is answered and dead-lettered."""
        try:
            self._queue(entry)
        except Exception as exc:
            log.exception("request entry rejected", extra={"stream": entry.stream.decode()})
            self._poison(entry, f"request entry could not be queued: {type(exc).__name__}")

    def _queue(self, entry: streams.Entry) -> None:
        key = self._streams.get(entry.stream)
        queue = self.queues.get(key) if key else None
        if queue is None:
            self._in_background(self._unserved(entry))
            return
        if isinstance(queue, EnsembleRunner) and entry.stream == queue.steps_stream:
            queue.on_step_reply(entry)  # a composing model's reply to an ensemble's step
            return
        raw_header = entry.fields.get(keys.FIELD_HEADER)
        data = entry.fields.get(keys.FIELD_DATA)
        if raw_header is None or data is None:
            self._poison(entry, "malformed request entry: its header or data field is missing")
            return
        try:
            header = envelope.decode_header(raw_header)
        except Exception as exc:
            self._poison(entry, f"malformed request header: {exc}")
            return
        if entry.deliveries > 1:
            metrics.child(metrics.REDELIVERED, "scheduler", queue.model, queue.version).inc()
        if entry.deliveries > self.settings.max_deliveries:
            self._poison(
                entry,
                f"request was delivered {entry.deliveries - 1} times to schedulers that "
                f"died; giving up after {self.settings.max_deliveries}",
            )
            return
        queue.add(header, entry.stream, entry.entry_id, data)

    def _poison(self, entry: streams.Entry, reason: str) -> None:
        parsed = keys.parse_request_stream(entry.stream)
        if parsed is None:
            log.error("entry of an unknown stream left alone", extra={"reason": reason})
            return
        model, version, _ = parsed
        self._in_background(poison.dead_letter(self.redis, model, version, entry, self.id, reason))

    async def _unserved(self, entry: streams.Entry) -> None:
        parsed = keys.parse_request_stream(entry.stream)
        if parsed is not None:
            await poison.answer_unserved(self.redis, parsed[0], parsed[1], entry, self.id)

    def _in_background(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run a write beside the read loop; if it fails, the entry stays pending and the next
        recovery finds it again."""

        async def guarded() -> None:
            try:
                await work
            except asyncio.CancelledError:
                raise
            except Exception:
                self._recover = True
                log.exception("answering a request entry failed; it stays pending")

        task = asyncio.create_task(guarded())
        self._background.add(task)
        task.add_done_callback(self._background.discard)
