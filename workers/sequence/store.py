"""Every Redis operation of one holding instance, over the keys of ``shared.wire.keys``.

Round trips are batched: the heads of many sequences are read in one pipeline, the states of an
execution's sequences in another, and an execution's replies and its commit go out together
(replies first, then the fenced commit script: a step is acknowledged only once answered).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast

import redis.asyncio as aioredis

from shared import lua
from shared.fleet.publish import queue_replies
from shared.runtime import redis_conn
from shared.wire import envelope, keys
from shared.wire.envelope import InferRequest, Reply

COMMITTED, ALREADY, OUT_OF_ORDER, RELEASED, NOT_HOLDER = 1, 2, 3, 4, 0


@dataclass(frozen=True)
class Head:
    """The oldest step of a sequence not yet committed: the only one that may run."""

    sequence: str
    step: int
    request: InferRequest

    @property
    def arrival_us(self) -> float:
        return self.request.enqueued_ms * 1000.0

    @property
    def sig(self) -> str:
        return "|".join(f"{t.name}:{t.shape}" for t in self.request.inputs)


def parse_head(sequence: str, raw: bytes | None) -> Head | None:
    if not raw:
        return None
    step, _, payload = raw.partition(b":")
    return Head(sequence, int(step), envelope.decode_request(payload))


@dataclass(frozen=True)
class StepCommit:
    head: Head
    ended: bool
    # input name -> (shape "d0,d1", bytes); empty: the state stays as committed before.
    states: dict[str, tuple[str, bytes]]


@dataclass(frozen=True)
class CommitResult:
    code: int
    following: Head | None


class SequenceStore:
    def __init__(self, r: aioredis.Redis, model: str, version: int, instance: str):
        self._redis = r
        self.model, self.version, self.instance = model, version, instance
        self.prefix = keys.sequence_prefix(model, version)
        self.held_key = keys.sequence_held(model, version, instance)
        self.bell_key = keys.sequence_bell(model, version, instance)
        self._commit = r.register_script(lua.SEQUENCE_COMMIT.source)
        self._release = r.register_script(lua.SEQUENCE_RELEASE_IDLE.source)
        self._adopt = r.register_script(lua.SEQUENCE_ADOPT.source)

    def binding(self, sequence: str) -> str:
        return keys.sequence_binding(self.model, self.version, sequence)

    def queue(self, sequence: str) -> str:
        return keys.sequence_queue(self.model, self.version, sequence)

    async def register(self, slots: int) -> None:
        await self._redis.hset(keys.sequence_slots(self.model, self.version), self.instance, slots)

    async def heads(self, sequences: Sequence[str]) -> dict[str, Head | None]:
        """Each sequence's head step if this instance still holds it (absent otherwise)."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for sequence in sequences:
                pipe.hget(self.binding(sequence), "holder")
                pipe.lindex(self.queue(sequence), 0)
            replies = await pipe.execute()
        found: dict[str, Head | None] = {}
        me = self.instance.encode()
        for index, sequence in enumerate(sequences):
            if replies[2 * index] == me:
                found[sequence] = parse_head(sequence, replies[2 * index + 1])
        return found

    async def states(
        self, sequences: Sequence[str]
    ) -> dict[str, tuple[str, int, dict[bytes, bytes]]]:
        """Each sequence's (holder, last committed step, fields) as committed."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for sequence in sequences:
                pipe.hgetall(self.binding(sequence))
            replies = await pipe.execute()
        out: dict[str, tuple[str, int, dict[bytes, bytes]]] = {}
        for sequence, fields in zip(sequences, replies, strict=True):
            holder = fields.get(b"holder", b"").decode()
            out[sequence] = (holder, int(fields.get(b"committed", 0)), fields)
        return out

    async def publish_and_commit(
        self,
        replies: Iterable[tuple[str, Reply]],
        steps: Sequence[StepCommit],
        stats: dict[str, int],
        now_ms: int,
        idle_ms: int,
        ttl_ms: int,
        slots: int,
    ) -> tuple[list[CommitResult], int]:
        """Replies, then the fenced commit, in one round trip; (per-step results, pulled)."""
        commit_keys = [self.held_key, keys.stats(self.model, self.version)]
        args: list[object] = [self.prefix, now_ms, self.instance, idle_ms, ttl_ms, slots]
        args.append(len(steps))
        for commit in steps:
            commit_keys += [self.binding(commit.head.sequence), self.queue(commit.head.sequence)]
            args += [commit.head.sequence, commit.head.step, int(commit.ended), len(commit.states)]
            for name, (shape, data) in commit.states.items():
                args += [name, shape, data]
        args += [len(stats), now_ms]
        for field, amount in stats.items():
            args += [field, amount]
        async with self._redis.pipeline(transaction=False) as pipe:
            queue_replies(pipe, replies)
            await redis_conn.queue_script(pipe, self._commit, commit_keys, args)
            results = await pipe.execute()
        out = results[-1]
        parsed = [
            CommitResult(int(out[2 * i]), parse_head(c.head.sequence, out[2 * i + 1]))
            for i, c in enumerate(steps)
        ]
        return parsed, int(out[-1])

    async def reconcile(
        self, now_ms: int, idle_ms: int, slots: int
    ) -> tuple[list[str], list[str], list[str], int]:
        """One round trip: register the slots, release idle sequences (forgetting entries that
        moved elsewhere, filling freed slots from the backlog), read what is held and the
        backlog. Returns (released, stale, held, backlog length)."""
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hset(keys.sequence_slots(self.model, self.version), self.instance, slots)
            await redis_conn.queue_script(
                pipe,
                self._release,
                [self.held_key],
                [self.prefix, now_ms, self.instance, idle_ms, slots],
            )
            pipe.zrange(self.held_key, 0, -1)
            pipe.zcard(keys.sequence_backlog(self.model, self.version))
            _, out, held, backlog = await pipe.execute()
        names = [item.decode() for item in out]
        cut = names.index("")
        return names[:cut], names[cut + 1 :], [s.decode() for s in held], int(backlog)

    async def release_idle(
        self, now_ms: int, idle_ms: int, slots: int
    ) -> tuple[list[str], list[str]]:
        """(sequences released for idling, sequences found held by another instance)."""
        released, stale, _, _ = await self.reconcile(now_ms, idle_ms, slots)
        return released, stale

    async def held(self) -> list[str]:
        held = await self._redis.zrange(self.held_key, 0, -1)
        return [cast(bytes, s).decode() for s in held]  # no scores; decode_responses=False

    async def adopt(
        self, instance: str, now_ms: int, dead_before_ms: int, idle_ms: int, force: bool = False
    ) -> tuple[int, int, int, int]:
        """Move a gone instance's sequences: (done or -1, adopted, released, backlogged)."""
        out = await self._adopt(
            keys=[keys.ready(self.model, self.version)],
            args=[self.prefix, now_ms, instance, dead_before_ms, idle_ms, int(force)],
        )
        done, adopted, released, backlogged = (int(x) for x in out)
        return done, adopted, released, backlogged

    async def slot_table(self) -> dict[str, int]:
        table = await self._redis.hgetall(keys.sequence_slots(self.model, self.version))
        return {cast(bytes, k).decode(): int(v) for k, v in table.items()}  # bytes: see held()
