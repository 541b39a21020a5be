"""Admission of one step of a sequence: Triton's request checks, then one atomic script that
binds the sequence to an instance slot and queues the step behind the sequence's earlier ones.

Sequence requests do not go through a scheduler's request stream: the order of a sequence is
decided here, once, by the script (Redis runs scripts one at a time), so requests sent through
any gateway replica execute in arrival order on the one instance that holds the sequence. The
script also does what Triton's sequence batcher does at enqueue: a step without START for an
unknown, ended or idle-released sequence is refused; START places a new sequence on the live
instance with the most free slots (or the backlog when all are taken). A step of a sequence
whose holder died is queued all the same: the workers' adoption moves the sequence, with its
queued steps and committed state, once the holder is dead past the dead bound
(``workers/sequence/adoption.py``), so a late heartbeat never splits a sequence.

The script takes every key it may touch in KEYS, the held set and doorbells of each instance
included: the gateway keeps, per version, the instances of the slots hash it last read and
passes their keys. When the script meets an instance that list lacks (a worker that started
since, or a holder the list never had) it writes nothing and names it; the list is read again
(one ``HKEYS``) and the call made once more. That costs two round trips more, once per change
of the instance set; every other admission is one round trip.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from gateway.core.validation import ValidRequest
from shared import lua, metrics
from shared.fleet.coalesced_script import CoalescedScript
from shared.model_config import ModelConfig
from shared.model_config.sequences import SequenceSpec, sequence_spec
from shared.wire import envelope, keys, sequence_params
from shared.wire.envelope import InferRequest
from shared.wire.errors import ConchError, ErrorCode, invalid
from shared.wire.sequence_params import SequenceParams

# A step up to this size rides along on the holder's doorbell, so that the holder of a sequence
# whose previous step it committed runs the step without reading its queue (larger steps are
# read from the queue: the doorbell stream keeps 1000 entries). sequence_admit.lua has the same
# number (tests/contract checks they agree).
BELL_PAYLOAD_MAX = 65_536

# Binding and queue outlive the idle timeout by this much: the idle release itself is exact
# (checked against ``last`` by every script); the key TTL only bounds what a fleet that died
# entirely leaves behind.
TTL_MARGIN_MS = 600_000

# The script, with its KEYS, ARGV and reply: shared/lua/sequence_admit.lua.
STALE = -4  # the script's reply when it meets an instance whose keys were not passed
TRIES = 3  # calls per admission (the instance set changing twice within one is rare)


def sequence_request(
    config: ModelConfig, parameters: dict[str, Any]
) -> tuple[SequenceParams, SequenceSpec | None]:
    """The request's sequence parameters (Triton parses them for every model) and the model's
    sequence spec (None: not a sequence model, which ignores them, as Triton's batchers do)."""
    return sequence_params.parse(parameters), sequence_spec(config)


def check_request(
    config: ModelConfig, spec: SequenceSpec, params: SequenceParams, valid: ValidRequest, rid: str
) -> None:
    """Triton's checks of a sequence request, in Triton's order and words."""
    corrid = spec.corrid
    if corrid is not None:
        given = "BYTES" if params.is_string else "UINT64"
        numeric = corrid.datatype in ("UINT64", "INT64", "UINT32", "INT32")
        if (params.is_string and corrid.datatype != "BYTES") or (
            not params.is_string and not numeric
        ):
            raise invalid(
                f"[request id: {rid or '<id_unknown>'}] sequence batching control "
                f"'{corrid.name}' data-type is '{given}', but model '{config.name}' expects "
                f"'{corrid.datatype}'"
            )
    if valid.batch_size > 1:
        raise invalid(
            f"inference request to model '{config.name}' must specify batch-size 1 due to "
            "requirements of sequence batcher"
        )
    if not params.in_sequence:
        raise invalid(
            f"inference request to model '{config.name}' must specify a non-zero or non-empty "
            "correlation ID"
        )


def no_start(config: ModelConfig, params: SequenceParams) -> ConchError:
    return invalid(
        f"inference request for sequence {params.label()} to model '{config.name}' must "
        "specify the START flag on the first request of the sequence"
    )


class SequenceAdmission:
    def __init__(self, r: aioredis.Redis, gone_ms: int):
        self._script = CoalescedScript(r, lua.SEQUENCE_ADMIT.source, convert=list)
        self._redis = r
        # A version counts as served while some worker was ready within this bound.
        self._gone_ms = gone_ms
        # (model, version) -> the instances whose keys admission passes (the slots hash as
        # last read, with any instance a script named since).
        self._instances: dict[tuple[str, int], list[str]] = {}

    async def _refresh(self, model: str, version: int, named: list[str]) -> list[str]:
        """The version's instances read again, with those the script named."""
        table = await self._redis.hkeys(keys.sequence_slots(model, version))
        found = [i.decode() if isinstance(i, bytes) else i for i in table]
        found += [i for i in named if i not in found]
        self._instances[(model, version)] = found
        return found

    async def admit(
        self, config: ModelConfig, spec: SequenceSpec, params: SequenceParams, request: InferRequest
    ) -> int:
        """1 once queued (or already queued by a retried call); -1 when no worker is live."""
        model, version, request_id = config.name, request.version, request.id
        now_ms, deadline_ms = request.enqueued_ms, request.deadline_ms
        idle_ms = max(1, spec.idle_us // 1000)
        instances = self._instances.get((model, version))
        if instances is None:
            instances = await self._refresh(model, version, [])
        for _ in range(TRIES):
            result = await self._script(
                keys=[
                    keys.ready(model, version),
                    keys.sequence_binding(model, version, params.key),
                    keys.sequence_queue(model, version, params.key),
                    keys.admitted(model, request_id),
                    keys.sequence_slots(model, version),
                    keys.sequence_backlog(model, version),
                    *keys.sequence_instance_keys(model, version, instances),
                ],
                args=[
                    now_ms,
                    idle_ms,
                    idle_ms + TTL_MARGIN_MS,
                    int(params.start),
                    int(params.end),
                    params.key,
                    envelope.encode(request),
                    max(1, deadline_ms - now_ms),
                    now_ms - self._gone_ms,
                    len(instances),
                    *instances,
                ],
            )
            if int(result[0]) != STALE:
                break
            named = [i.decode() if isinstance(i, bytes) else str(i) for i in result[3:]]
            instances = await self._refresh(model, version, named)
        code, released, backlogged = (int(x) for x in result[:3])
        metrics.record_sequence_event(model, version, "idle_released", released)
        if code == 1 and params.start:
            metrics.record_sequence_event(model, version, "started")
            metrics.record_sequence_event(model, version, "backlogged", backlogged)
        if code == -3:
            raise no_start(config, params)
        if code == STALE:
            raise ConchError(
                ErrorCode.UNAVAILABLE,
                f"the instances of model '{model}' version {version} kept changing; try again",
            )
        if code not in (1, 2, -1):
            raise ConchError(ErrorCode.INTERNAL, f"sequence admission answered {code}")
        return min(code, 1)
