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
of the instance set; every other admission is one round trip. The script's caller is shared
(``shared.fleet.sequence_admission``): a Python model's BLS calls admit sequence steps with it too.
"""

from __future__ import annotations

from typing import Any

from gateway.core.validation import ValidRequest
from shared.fleet.sequence_admission import BELL_PAYLOAD_MAX as BELL_PAYLOAD_MAX
from shared.fleet.sequence_admission import SequenceAdmission as SequenceAdmission
from shared.model_config import ModelConfig
from shared.model_config.sequences import SequenceSpec, sequence_spec
from shared.wire import sequence_params
from shared.wire.errors import invalid
from shared.wire.sequence_params import SequenceParams


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
