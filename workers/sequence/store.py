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
        self.held_key = keys.sequence_held(model, version, instance)
        self.bell_key = keys.sequence_bell(model, version, instance)
        self.backlog_key = keys.sequence_backlog(model, version)
        # The keys of this instance that every holder script takes first: held, bell, backlog.
        self.own_keys = [self.held_key, self.bell_key, self.backlog_key]
        # The backlog's oldest sequences as last read (reconcile, or a script's reply): a
        # script that may free a slot takes their keys, so that it fills the slot itself.
        self.waiting: list[str] = []
        self._commit = r.register_script(lua.SEQUENCE_COMMIT.source)
        self._pull = r.register_script(lua.SEQUENCE_PULL.source)
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
        """Replies, then the fenced commit, in one round trip; (per-step results, pulled).
        A commit that ends a sequence fills the freed slot from the backlog: from the backlog's
        oldest sequences this instance last read (``waiting``) in the same script, or with one
        more round trip when the backlog changed (the commit names them: ``pull``)."""
        commit_keys = [*self.own_keys, keys.stats(self.model, self.version)]
        args: list[object] = [now_ms, self.instance, idle_ms, ttl_ms, slots]
        args.append(len(steps))
        for commit in steps:
            commit_keys += [self.binding(commit.head.sequence), self.queue(commit.head.sequence)]
            args += [commit.head.sequence, commit.head.step, int(commit.ended), len(commit.states)]
            for name, (shape, data) in commit.states.items():
                args += [name, shape, data]
        args += [len(stats), now_ms]
        for field, amount in stats.items():
            args += [field, amount]
        waiting = self.waiting if any(commit.ended for commit in steps) else []
        commit_keys += self.bindings(waiting)
        args += [len(waiting), *waiting]
        async with self._redis.pipeline(transaction=False) as pipe:
            queue_replies(pipe, replies)
            await redis_conn.queue_script(pipe, self._commit, commit_keys, args)
            results = await pipe.execute()
        out = results[-1]
        parsed = [
            CommitResult(int(out[2 * i]), parse_head(c.head.sequence, out[2 * i + 1]))
            for i, c in enumerate(steps)
        ]
        return parsed, await self.pull_more(int(out[-2]), out[-1], now_ms, idle_ms, slots)

    def bindings(self, sequences: Iterable[str]) -> list[str]:
        return [keys.sequence_binding(self.model, self.version, s) for s in sequences]

    async def pull_more(
        self, got: int, named: list[bytes], now_ms: int, idle_ms: int, slots: int
    ) -> int:
        """After a script that may have freed slots and took ``got`` backlogged sequences into
        them: take those it named (it had not their keys; none named, no round trip). Returns
        how many were taken in all."""
        if got:
            self.waiting = []  # some were taken: the backlog's oldest are read again later
        if not named:
            return got
        return got + await self.pull([item.decode() for item in named], now_ms, idle_ms, slots)

    async def pull(self, waiting: list[str], now_ms: int, idle_ms: int, slots: int) -> int:
        """Take the backlog's oldest sequences (``waiting``, as a script named them) into this
        instance's free slots; returns how many. When the backlog changed meanwhile the script
        names its new oldest and this tries again, a few times (the reconcile takes the rest)."""
        pulled = 0
        for _ in range(3):
            got, more = await self._pull(
                keys=[*self.own_keys, *self.bindings(waiting)],
                args=[now_ms, self.instance, idle_ms, slots, len(waiting), *waiting],
            )
            pulled += int(got)
            waiting = [item.decode() for item in more]
            if not waiting:
                break
        self.waiting = waiting
        return pulled

    async def reconcile(
        self, now_ms: int, idle_ms: int, slots: int
    ) -> tuple[list[str], list[str], list[str], int]:
        """Register the slots, release idle sequences (forgetting entries that moved elsewhere,
        filling free slots from the backlog), read what is held and the backlog. One round trip
        when nothing is due and no backlogged sequence can be taken; otherwise a second one,
        the release script with the keys of what the first read found. Returns (released,
        stale, held, backlog length)."""
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hset(keys.sequence_slots(self.model, self.version), self.instance, slots)
            pipe.zrange(self.held_key, 0, -1, withscores=True)
            pipe.zrange(self.backlog_key, 0, max(0, slots - 1))
            pipe.zcard(self.backlog_key)
            _, scored, heads, backlog = await pipe.execute()
        held = [member.decode() for member, _ in scored]
        due = [member.decode() for member, score in scored if score <= now_ms]
        waiting = self.waiting = [item.decode() for item in heads]
        if not due and not (waiting and len(held) < slots):
            return [], [], held, int(backlog)
        bindings = self.bindings(waiting)
        async with self._redis.pipeline(transaction=False) as pipe:
            await redis_conn.queue_script(
                pipe,
                self._release,
                [*self.own_keys, *keys.sequence_keys(self.model, self.version, due), *bindings],
                [now_ms, self.instance, idle_ms, slots, len(due), *due, len(waiting), *waiting],
            )
            pipe.zrange(self.held_key, 0, -1)
            pipe.zcard(self.backlog_key)
            out, now_held, backlog = await pipe.execute()
        names = [item.decode() for item in out]
        cut = names.index("")
        return names[:cut], names[cut + 1 :], [s.decode() for s in now_held], int(backlog)

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
        """Move a gone instance's sequences: (done or -1, adopted, released, backlogged).

        Two phases: read the gone instance's held set and the slots hash, then run the script
        with their keys; it does nothing and answers -2 when either changed meanwhile, and this
        reads again (a few times; the adoption loop comes back later in any case)."""
        model, version = self.model, self.version
        out: list[int] = [-2, 0, 0, 0]
        for _ in range(5):
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.zrange(keys.sequence_held(model, version, instance), 0, -1)
                pipe.hkeys(keys.sequence_slots(model, version))
                held_raw, slots_raw = await pipe.execute()
            held = [s.decode() for s in held_raw]
            instances = [instance, *(i.decode() for i in slots_raw if i.decode() != instance)]
            reply = await self._adopt(
                keys=[
                    keys.ready(model, version),
                    keys.sequence_slots(model, version),
                    self.backlog_key,
                    *keys.sequence_instance_keys(model, version, instances),
                    *keys.sequence_keys(model, version, held),
                ],
                args=[
                    *(now_ms, dead_before_ms, idle_ms, int(force)),
                    *(len(instances), *instances),
                    *(len(held), *held),
                ],
            )
            out = [int(x) for x in reply]
            if out[0] != -2:
                break
        done, adopted, released, backlogged = out
        return done, adopted, released, backlogged

    async def slot_table(self) -> dict[str, int]:
        table = await self._redis.hgetall(keys.sequence_slots(self.model, self.version))
        return {cast(bytes, k).decode(): int(v) for k, v in table.items()}  # bytes: see held()
