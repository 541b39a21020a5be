"""The atomic admission script: is some worker alive, is there room, and has this request been
queued already? One round trip on the model's slot.

Liveness is judged generously: the request is refused at once only when no worker of the version
has been ready within the *gone* bound (30 s by default), never because one heartbeat is late
on a busy machine; a version whose workers stopped cleanly (they leave the readiness set) is
refused at once. Otherwise the request is queued and its deadline decides.

Writes that a client library may retry are idempotent: redis-py sends a pipeline again when its
connection drops after the command went out, so the script records the request id (until the
request's deadline) and a second call for the same id queues nothing.

The direct branch (``shared.fleet.direct_path``): for a model whose batcher never waits (queue delay
0), the caller passes the version's batch stream and every request stream of the version; when
all of them are empty (nothing queued, held by a scheduler or in flight: the scheduler deletes
request entries when it dispatches them, workers delete batches when they ack them) the request
is added to the batch stream as a batch of one (``shared.wire.batch_entry``: its header and payload,
no Batch envelope) and the script answers ``DIRECT``. Same liveness, dedupe and deadline rules;
the request simply waited 0 in the queue.

Only while the version's last execution was a batch of one (``last_batch`` in its statistics
hash, written by the worker's ack; absent counts as one): under closed-loop load the worker's
ack empties every stream at once, and without this rule the first request of the next wave
would go direct alone and the wave's batch would wait behind it (measured: a quarter of `mlp`'s
throughput at c=64). A batch larger than one sends requests through the scheduler until it forms
a batch of one again, i.e. until the load has gone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from redis.typing import EncodableT

from shared.wire import keys

# The script itself, with its KEYS, ARGV and reply: shared/lua/enqueue.lua (``lua.ENQUEUE``).

ADMITTED = 1
# Admitted straight to the batch stream (the direct path).
DIRECT = 2
NO_WORKER = -1
QUEUE_FULL = -2


@dataclass(frozen=True)
class AdmissionCall:
    keys: list[str]
    args: list[EncodableT]


def admission_call(
    *,
    model: str,
    version: int,
    priority: int,
    request_id: str,
    now_ms: int,
    deadline_ms: int,
    gone_ms: int,
    max_queue_size: int,
    header: bytes,
    data: bytes,
    direct_levels: Sequence[int] = (),
) -> AdmissionCall:
    """The script's keys and arguments for one request. ``direct_levels``: the model's priority
    levels when it may take the direct path (``shared.fleet.direct_path.direct_levels``), else
    empty."""
    script_keys = [
        keys.ready(model, version),
        keys.request_stream(model, version, priority),
        keys.admitted(model, request_id),
    ]
    script_keys.extend(direct_keys(model, version, direct_levels))
    return AdmissionCall(
        keys=script_keys,
        args=admission_args(now_ms, deadline_ms, gone_ms, max_queue_size, header, data),
    )


def direct_keys(model: str, version: int, direct_levels: Sequence[int]) -> list[str]:
    """The keys after the first three that the direct path needs (none without it)."""
    if not direct_levels:
        return []
    return [
        keys.batch_stream(model, version),
        keys.stats(model, version),
        *(keys.request_stream(model, version, level) for level in direct_levels),
    ]


def admission_args(
    now_ms: int, deadline_ms: int, gone_ms: int, max_queue_size: int, header: bytes, data: bytes
) -> list[EncodableT]:
    """The script's ARGV for one request."""
    return [now_ms - gone_ms, max_queue_size, header, data, max(1, deadline_ms - now_ms)]
