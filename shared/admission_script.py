"""The atomic admission script: is some worker alive, is there room, and has this request been
queued already? One round trip on the model's slot.

Liveness is judged generously: the request is refused at once only when no worker of the version
has been ready within the *gone* bound (30 s by default), never because one heartbeat is late
on a busy machine; a version whose workers stopped cleanly (they leave the readiness set) is
refused at once. Otherwise the request is queued and its deadline decides.

Writes that a client library may retry are idempotent: redis-py sends a pipeline again when its
connection drops after the command went out, so the script records the request id (until the
request's deadline) and a second call for the same id queues nothing.

The direct branch (``shared.direct_path``): for a model whose batcher never waits (queue delay
0), the caller passes the version's batch stream and every request stream of the version; when
all of them are empty (nothing queued, held by a scheduler or in flight: the scheduler deletes
request entries when it dispatches them, workers delete batches when they ack them) the request
is added to the batch stream as a batch of one (``shared.batch_entry``: its header and payload,
no Batch envelope) and the script answers ``DIRECT``. Same liveness, dedupe and deadline rules;
the request simply waited 0 in the queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from shared import keys

# KEYS: readiness set, request stream, the request's admission record; for the direct branch
#       also the batch stream, then every request stream of the version.
# ARGV: oldest readiness expiry (ms) that still counts as live, max queue size (0: none),
#       header, data, milliseconds to keep the admission record.
ENQUEUE_LUA = """
if redis.call('EXISTS', KEYS[3]) == 1 then return 1 end
if redis.call('ZCOUNT', KEYS[1], ARGV[1], '+inf') == 0 then return -1 end
if #KEYS > 3 and redis.call('XLEN', KEYS[4]) == 0 then
  local idle = true
  for i = 5, #KEYS do
    if redis.call('XLEN', KEYS[i]) > 0 then idle = false break end
  end
  if idle then
    redis.call('XADD', KEYS[4], '*', 'h', ARGV[3], 'r', ARGV[4])
    redis.call('SET', KEYS[3], '1', 'PX', ARGV[5])
    return 2
  end
end
local max_queue = tonumber(ARGV[2])
if max_queue > 0 and redis.call('XLEN', KEYS[2]) >= max_queue then return -2 end
redis.call('XADD', KEYS[2], '*', 'h', ARGV[3], 'd', ARGV[4])
redis.call('SET', KEYS[3], '1', 'PX', ARGV[5])
return 1
"""

ADMITTED = 1
# Admitted straight to the batch stream (the direct path).
DIRECT = 2
NO_WORKER = -1
QUEUE_FULL = -2


@dataclass(frozen=True)
class AdmissionCall:
    keys: list[str]
    args: list[object]


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
    levels when it may take the direct path (``shared.direct_path.direct_levels``), else empty."""
    script_keys = [
        keys.ready(model, version),
        keys.request_stream(model, version, priority),
        keys.admitted(model, request_id),
    ]
    if direct_levels:
        script_keys.append(keys.batch_stream(model, version))
        script_keys.extend(keys.request_stream(model, version, level) for level in direct_levels)
    return AdmissionCall(
        keys=script_keys,
        args=[now_ms - gone_ms, max_queue_size, header, data, max(1, deadline_ms - now_ms)],
    )
