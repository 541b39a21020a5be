"""The atomic admission of one step of a sequence: bind the sequence to an instance slot and queue
the step behind the sequence's earlier ones (``shared/lua/sequence_admit.lua``).

The gateway (a client's step, after Triton's request checks: ``gateway.core.sequence_admission``)
and a Python model's BLS call with a ``correlation_id`` (``workers.python.bls_client``) admit
steps the same way, so a sequence's steps from either keep one order on one holder.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from shared import lua, metrics
from shared.fleet.coalesced_script import CoalescedScript
from shared.model_config import ModelConfig
from shared.model_config.sequences import SequenceSpec
from shared.wire import envelope, keys
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
