"""The serving loop of one execution instance: take the version's next batch and process it.

Each instance has its own task and its own blocking read on the version's batch stream, so an
idle instance takes the next batch and a busy one takes nothing. Batches reclaimed from a dead
worker wait in the version's queue and go first. A batch is acked only after its replies are
published; a worker that dies leaves the batch pending, and another worker of the same version
takes it over once the dead one's heartbeat has expired (``workers.reclaim``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from shared import keys, redis_conn, streams
from workers.backend import ModelInstance
from workers.batch import BatchProcessor
from workers.loader import LoadedVersion
from workers.settings import WorkerSettings

log = logging.getLogger(__name__)


class BatchLoop:
    def __init__(
        self,
        redis: aioredis.Redis,
        settings: WorkerSettings,
        worker_id: str,
        stopping: asyncio.Event,
        batches: BatchProcessor,
    ):
        self._redis = redis
        self._settings = settings
        self._id = worker_id
        self._stopping = stopping
        self._process = batches.process

    async def serve(
        self,
        loaded: LoadedVersion,
        instance: ModelInstance,
        reclaimed: asyncio.Queue[streams.Entry],
    ) -> None:
        stream = keys.batch_stream(loaded.name, loaded.version)
        consumer = self._id
        client: aioredis.Redis = redis_conn.dedicated(
            self._settings.redis_url, name="conch-worker-read"
        )
        try:
            while not self._stopping.is_set() and not loaded.retired:
                if not reclaimed.empty():
                    await self._process_or_retry(
                        loaded, instance, reclaimed.get_nowait(), reclaimed
                    )
                    continue
                try:
                    reply = await client.xreadgroup(
                        keys.WORKER_GROUP, consumer, {stream: b">"}, count=1, block=500
                    )
                except asyncio.CancelledError:
                    raise
                except ResponseError as exc:
                    await self._recover_group(stream, exc)
                    continue
                except Exception:
                    log.exception("batch stream read failed; retrying")
                    await asyncio.sleep(0.2)
                    continue
                for entry in streams.parse_read(reply):
                    await self._process_or_retry(loaded, instance, entry, reclaimed)
        finally:
            await client.aclose()

    async def _process_or_retry(
        self,
        loaded: LoadedVersion,
        instance: ModelInstance,
        entry: streams.Entry,
        retry: asyncio.Queue[streams.Entry],
    ) -> None:
        """A batch whose processing failed (Redis gone mid-batch, say) stays pending in Redis;
        it is tried again here, counted as a delivery, so one that keeps failing is answered
        with an error after max_deliveries instead of being retried forever (one that cannot
        be decoded never reaches that check, and is retried on)."""
        try:
            await self._process(loaded, instance, entry)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("batch processing failed; trying it again", extra={"model": loaded.name})
            await asyncio.sleep(0.2)
            retry.put_nowait(dataclasses.replace(entry, deliveries=entry.deliveries + 1))

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
