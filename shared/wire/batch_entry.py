"""Reading a batch stream entry: a batch the scheduler formed, or a request sent direct.

Two writers add to a version's batch stream: the scheduler's dispatch script (field ``d``: a
msgpack :class:`~shared.wire.envelope.Batch`) and the admission script's direct branch (fields ``h``
and ``r``: the request's header and payload exactly as a request stream holds them, so the
submitter encodes nothing twice). Every reader of batch entries (the worker's batch processing,
its poison answers) decodes through :func:`decode`, so both read as a ``Batch``: a direct
request is a batch of one whose id is the entry id, formed when Redis added it, and whose time
in the queue runs from its admission to that moment (0-ish: it waited for nothing).
"""

from __future__ import annotations

from collections.abc import Mapping

from shared.wire import envelope, keys
from shared.wire.envelope import Batch


def is_direct(fields: Mapping[bytes, bytes]) -> bool:
    return keys.FIELD_DIRECT in fields


def decode(fields: Mapping[bytes, bytes], entry_id: bytes, model: str, version: int) -> Batch:
    """The entry as a Batch; raises (msgspec errors, KeyError, ValueError) when it does not
    decode, which the caller treats as poison."""
    raw = fields.get(keys.FIELD_DIRECT)
    if raw is None:
        return envelope.decode_batch(fields[keys.FIELD_DATA])
    header = envelope.decode_header(fields[keys.FIELD_HEADER])
    added_ms = int(entry_id.partition(b"-")[0])
    return Batch(
        batch_id=entry_id.decode(),
        model=model,
        version=version,
        formed_ms=added_ms,
        requests=[raw],
        queue_ns=[max(0, added_ms - header.enqueued_ms) * 1_000_000],
    )


def direct_priority(fields: Mapping[bytes, bytes]) -> int | None:
    """The priority level a direct request was admitted at; None for a scheduler's batch."""
    if keys.FIELD_DIRECT not in fields:
        return None
    return envelope.decode_header(fields[keys.FIELD_HEADER]).priority
