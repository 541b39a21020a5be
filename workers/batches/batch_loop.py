"""The serving loop of one execution instance: take the version's next batch and process it.

Each instance has its own task and its own blocking read on the version's batch stream, so an
idle instance takes the next batch and a busy one takes nothing. Batches reclaimed from a dead
worker, recovered after a lost read, or to be tried again wait in the version's lane and go
first. A batch is acked only after its replies are published; a worker that dies leaves the batch
pending, and another worker of the same version takes it over once the dead one's heartbeat is
older than the dead bound (``workers.batches.reclaim``). After a failed read, whose answer may have
delivered a batch that never arrived, the loop recovers this worker's pending batches that no
loop has in hand.

A batch's replies and fenced ack ride on the loop's next read (``workers.batches.batch_outcome``):
one write carries them and the blocking ``XREADGROUP``, so an instance wakes once per batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from shared.fleet import streams
from shared.runtime import redis_conn
from shared.runtime.redis_retry import CONNECTION_ERRORS
from shared.runtime.wakeable_read import READ_BLOCK_MS, WakeableRead
from shared.wire import keys
from workers.backend import ModelInstance
from workers.batches.batch import BatchProcessor
from workers.batches.batch_outcome import Outcome
from workers.batches.lane import Lane
from workers.loading.loader import LoadedVersion
from workers.ratelimit.gate import RateGate
from workers.settings import WorkerSettings

log = logging.getLogger(__name__)

# Failures of Redis itself, not of the batch.
REDIS_UNREACHABLE = CONNECTION_ERRORS


class BatchLoop:
    def __init__(
        self,
        redis: aioredis.Redis,
        settings: WorkerSettings,
        worker_id: str,
        stopping: asyncio.Event,
        batches: BatchProcessor,
        gate: RateGate | None = None,
    ):
        self._redis = redis
        self._settings = settings
        self._id = worker_id
        self._stopping = stopping
        self._process = batches.process
        self._send = batches.send
        self._gate = gate  # the rate limiter (``workers.ratelimit``): held around each batch

    async def serve(self, loaded: LoadedVersion, instance: ModelInstance, lane: Lane) -> None:
        stream = keys.batch_stream(loaded.name, loaded.version)
        consumer = self._id
        client: aioredis.Redis = redis_conn.dedicated(
            self._settings.redis_url, name="conch-worker-read", block_ms=READ_BLOCK_MS
        )
        reads = WakeableRead(client, self._redis, fallback_block_ms=500)
        lane.wakers.add(reads.wake)
        recover = False
        # The last batch's replies and ack, not sent yet: they ride on the next read.
        unsent: Outcome | None = None
        try:
            while not (self._stopping.is_set() or lane.stop.is_set() or loaded.retired):
                if recover:
                    await self._send_alone(unsent, lane)
                    unsent = None
                    recover = not await self._recover_own(stream, lane)
                    continue
                if not lane.waiting.empty():
                    await self._send_alone(unsent, lane)
                    unsent = None
                    unsent = await self._process_or_retry(
                        loaded, instance, lane.waiting.get_nowait(), lane, reads.enabled
                    )
                    continue
                if not reads.enabled:  # Redis Cluster: replies and reads go to other nodes
                    await self._send_alone(unsent, lane)
                    unsent = None
                sending, unsent = unsent, None
                try:
                    if sending is None:
                        reply = await reads.read(
                            lambda: client.xreadgroup(
                                keys.WORKER_GROUP,
                                consumer,
                                {stream: b">"},
                                count=1,
                                block=reads.block_ms,
                            )
                        )
                    else:
                        reply, unsent = await reads.read(
                            lambda sending=sending: self._send_and_read(  # type: ignore[misc]  # lambda default
                                client, sending, stream, consumer, reads.block_ms, lane
                            )
                        )
                        if isinstance(reply, Exception):
                            raise reply
                except asyncio.CancelledError:
                    raise
                except ResponseError as exc:
                    recover = True
                    await self._recover_group(stream, exc)
                    continue
                except Exception:
                    if sending is not None and not sending.settled:
                        # The write may or may not have gone through: sent again alone (a
                        # gateway keeps the first reply; the fence refuses a second ack).
                        unsent = sending
                    recover = True
                    log.exception("batch stream read failed; retrying")
                    await asyncio.sleep(0.2)
                    continue
                for entry in streams.parse_read(reply):
                    await self._send_alone(unsent, lane)
                    unsent = None
                    lane.held.add(entry.entry_id)
                    unsent = await self._process_or_retry(
                        loaded, instance, entry, lane, reads.enabled
                    )
        finally:
            lane.wakers.discard(reads.wake)
            try:
                await self._send_alone(unsent, lane)
                if lane.streaming:  # open streams end first (the drain timeout bounds it)
                    await asyncio.wait(list(lane.streaming))
            finally:
                await client.aclose()

    async def _send_and_read(
        self,
        client: aioredis.Redis,
        outcome: Outcome,
        stream: str,
        consumer: str,
        block_ms: int,
        lane: Lane,
    ) -> tuple[Any, Outcome | None]:
        """One write: the last batch's replies and fenced ack, then the blocking read of the
        next batch. The ack's answer is read as soon as Redis gives it (not when the read
        ends), then the read's. Returns the read's answer (an error as an object), and the
        outcome again if its commands failed (to be sent alone)."""
        pipe = client.pipeline(transaction=False)  # only to pack the commands
        outcome.queue(pipe)
        ack_at = len(pipe.command_stack) - 1
        pipe.xreadgroup(keys.WORKER_GROUP, consumer, {stream: b">"}, count=1, block=block_ms)
        commands = list(pipe.command_stack)
        await client.initialize()  # the dedicated client's one connection
        connection = client.connection
        assert connection is not None
        answers: list[Any] = []
        unsent: Outcome | None = None
        try:
            await connection.send_packed_command(
                connection.pack_commands([args for args, _ in commands])
            )
            for args, options in commands:
                if len(answers) == ack_at + 1:
                    if outcome.settle(answers):
                        lane.held.discard(outcome.entry.entry_id)
                    else:
                        unsent = outcome
                try:
                    answers.append(await client.parse_response(connection, args[0], **options))
                except ResponseError as exc:
                    answers.append(exc)
        except BaseException:
            await connection.disconnect()  # answers may be left on the wire
            raise
        return answers[-1], unsent

    async def _send_alone(self, outcome: Outcome | None, lane: Lane) -> None:
        """Send an outcome through the pool; a failure leaves its batch to be tried again."""
        if outcome is None:
            return
        try:
            await self._send(outcome)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await self._retry_later(outcome.entry, lane, exc, outcome.model)
            return
        lane.held.discard(outcome.entry.entry_id)

    async def _process_or_retry(
        self,
        loaded: LoadedVersion,
        instance: ModelInstance,
        entry: streams.Entry,
        lane: Lane,
        defer: bool = False,
    ) -> Outcome | None:
        """A batch whose processing failed (Redis gone mid-batch, the backend raising) stays pending
        in Redis; it is tried again here, counted as a delivery, so one that keeps failing is
        answered with errors and dead-lettered after max_deliveries. ``defer``: an ordinary batch's
        replies and ack are returned, sent with the next read (``preserve_ordering``: sent here)."""
        held = self._gate.held(loaded, instance) if self._gate else contextlib.nullcontext()
        with lane.order.entered(loaded.model.config, entry.entry_id) as ordered:
            try:
                async with held:
                    done = await self._process(loaded, instance, entry, defer or ordered)
                if ordered and isinstance(done, Outcome):  # after its earlier batches, unheld
                    await lane.order.in_turn(entry.entry_id, self._send_alone(done, lane))
                    return None
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                await self._retry_later(entry, lane, exc, loaded.name)
                return None
        if isinstance(done, Outcome):
            return done
        if done is None:
            lane.held.discard(entry.entry_id)
        else:  # a decoupled batch stays in hand until its streams ended and it is acked
            lane.streaming.add(done)
            done.add_done_callback(lambda _: lane.held.discard(entry.entry_id))
            done.add_done_callback(lane.streaming.discard)
        return None

    async def _retry_later(
        self, entry: streams.Entry, lane: Lane, exc: Exception, model: str
    ) -> None:
        if isinstance(exc, REDIS_UNREACHABLE):
            # Redis away (a failover, a restart): not the batch's fault, so not a delivery
            # that counts towards dead-lettering it; tried again once Redis answers.
            log.warning(
                "batch held until Redis answers again", extra={"model": model, "error": repr(exc)}
            )
            await asyncio.sleep(0.5)
            # Counted as a redelivery once (so the retry checks it still owns the batch: it may
            # have been claimed meanwhile), never more: Redis's outage is not the batch's fault.
            lane.put(dataclasses.replace(entry, deliveries=max(entry.deliveries, 2)))
            return
        log.exception(
            "batch processing failed; trying it again", extra={"model": model}, exc_info=exc
        )
        await asyncio.sleep(0.2)
        lane.put(dataclasses.replace(entry, deliveries=entry.deliveries + 1))

    async def _recover_own(self, stream: str, lane: Lane) -> bool:
        """Batches pending under this worker that no loop has in hand go to the lane; those
        deleted meanwhile are acked. False when Redis could not be asked yet."""
        try:
            pending = await streams.own_pending(self._redis, stream, keys.WORKER_GROUP, self._id)
            lost = [(i, n) for i, n in pending if i not in lane.held]
            if not lost:
                return True
            async with self._redis.pipeline(transaction=False) as pipe:
                for entry_id, _ in lost:
                    pipe.xrange(stream, entry_id, entry_id)
                rows = await pipe.execute()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("could not recover this worker's pending batches yet", exc_info=True)
            await asyncio.sleep(0.2)
            return False
        deleted: list[bytes] = []
        for (entry_id, delivered), row in zip(lost, rows, strict=True):
            if entry_id in lane.held:  # another loop recovered it meanwhile
                continue
            if row and row[0][1]:
                lane.put(streams.Entry(stream.encode(), entry_id, row[0][1], delivered))
            else:
                deleted.append(entry_id)
        if deleted:  # finished by this worker, the ack lost: nothing left to do
            with contextlib.suppress(Exception):
                await self._redis.xack(stream, keys.WORKER_GROUP, *deleted)
        log.warning(
            "recovered this worker's pending batches", extra={"stream": stream, "count": len(lost)}
        )
        return True

    async def _recover_group(self, stream: str, exc: ResponseError) -> None:
        """NOGROUP: Redis restarted empty; recreate the group. Never let the loop die of it."""
        if "NOGROUP" not in str(exc):
            log.error("batch stream read failed; retrying", extra={"error": str(exc)})
            await asyncio.sleep(0.2)
            return
        log.warning(
            "batch stream group missing (redis restarted?); recreating", extra={"stream": stream}
        )
        try:
            await streams.ensure_group(self._redis, stream, keys.WORKER_GROUP)
        except Exception as error:  # Redis still coming back: the next read retries
            log.warning("could not recreate the group yet", extra={"error": str(error)})
            await asyncio.sleep(0.2)
