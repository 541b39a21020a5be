"""Coalesced admission: the enqueue script calls of one event-loop turn share one pipeline.

At high concurrency a gateway process receives many requests in the same turn of its loop;
sending their EVALSHAs as one pipeline costs one write and one read instead of one each, on
the gateway and on Redis. A lone request still goes out in the very next turn, so latency at
low load is unchanged.

On a single Redis (not a cluster) without a write concern, the batch goes out on a pooled
connection directly, without redis-py's pipeline: its machinery (the command stack, the retry
wrapper, a timeout and a response-callback lookup per reply) was about a tenth of a gateway's
Python work per request at c=64, for EVALSHAs that need none of it. One bound covers all of a
batch's replies. A connection error there falls back to the pipeline, whose retry policy
reconnects (the scripts are idempotent: they record the request id).
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from shared.fleet import durability
from shared.runtime.redis_retry import CONNECTION_ERRORS

Call = tuple[Sequence[str], Sequence[object], asyncio.Future[Any]]


class CoalescedScript:
    """``convert`` turns the script's reply into the caller's value (an int by default)."""

    def __init__(self, r: aioredis.Redis, source: str, convert: Callable[[Any], Any] = int):
        self._redis = r
        self._source = source
        self._convert = convert
        self._sha = hashlib.sha1(source.encode()).hexdigest()
        self._pending: list[Call] = []
        self._flushing: set[asyncio.Task[None]] = set()

    async def __call__(self, keys: Sequence[str], args: Sequence[object]) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append((keys, args, future))
        if len(self._pending) == 1:
            # The task's first step runs in the loop's next turn, after every request of this
            # turn has added its call: it takes them all (a callback that then started the
            # task would cost one more turn before the write).
            task = asyncio.ensure_future(self._flush())
            self._flushing.add(task)
            task.add_done_callback(self._flushing.discard)
        return await future

    async def _flush(self) -> None:
        batch, self._pending = self._pending, []
        try:
            results = await self._run(batch)
        except Exception as exc:
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, _, future), result in zip(batch, results, strict=True):
            if future.done():
                continue
            if isinstance(result, Exception):
                future.set_exception(result)
            else:
                future.set_result(self._convert(result))

    async def _run(self, batch: list[Call]) -> list[object]:
        results = await self._pipeline(batch)
        if any(isinstance(r, NoScriptError) for r in results):
            # Redis restarted or flushed its scripts: load once, then run what failed again.
            await self._redis.script_load(self._source)
            retry = [i for i, r in enumerate(results) if isinstance(r, NoScriptError)]
            for index, result in zip(
                retry, await self._pipeline([batch[i] for i in retry]), strict=True
            ):
                results[index] = result
        return results

    async def _pipeline(self, batch: list[Call]) -> list[object]:
        wait = durability.of(self._redis)
        if wait is None and isinstance(self._redis, aioredis.Redis):
            try:
                return await self._on_connection(batch)
            except CONNECTION_ERRORS:
                pass  # the pipeline below reconnects by the client's retry policy
        async with self._redis.pipeline(transaction=False) as pipe:
            for keys, args, _ in batch:
                # execute_command: redis-py blocks the evalsha method in a cluster pipeline,
                # not the command (its keys pick the slot as for any other).
                pipe.execute_command("EVALSHA", self._sha, len(keys), *keys, *args)
            if wait is None:
                return await pipe.execute(raise_on_error=False)
            waits = durability.queue_wait(pipe, wait, [keys[0] for keys, _, _ in batch])
            results = await pipe.execute(raise_on_error=False)
        durability.check(results[-waits:], wait, "admission")
        return results[:-waits]

    async def _on_connection(self, batch: list[Call]) -> list[object]:
        """The batch as one write and its replies read in order, on one pooled connection."""
        pool = self._redis.connection_pool
        conn = await pool.get_connection()
        try:
            sha = self._sha
            await conn.send_packed_command(
                conn.pack_commands(
                    [("EVALSHA", sha, len(keys), *keys, *args) for keys, args, _ in batch]
                )
            )
            results: list[object] = []
            try:
                # One bound for every reply (redis-py would arm one per reply); a read cut
                # short disconnects the connection (read_response does), so it never desyncs.
                async with asyncio.timeout(conn.socket_timeout):
                    for _ in batch:
                        try:
                            results.append(await conn.read_response(timeout=math.inf))
                        except ResponseError as exc:
                            results.append(exc)
            except TimeoutError:
                await conn.disconnect(nowait=True)
                raise RedisTimeoutError("Timeout reading an admission pipeline's replies") from None
            return results
        finally:
            await pool.release(conn)
