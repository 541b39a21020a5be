"""Coalesced admission: the enqueue script calls of one event-loop turn share one pipeline.

At high concurrency a gateway process receives many requests in the same turn of its loop;
sending their EVALSHAs as one pipeline costs one write and one read instead of one each, on
the gateway and on Redis. A lone request still goes out in the very next turn, so latency at
low load is unchanged.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

from shared import durability

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
