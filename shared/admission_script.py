"""The atomic admission script: is some worker alive, is there room, and has this request been
queued already? One round trip on the model's slot.

Liveness is judged generously: the request is refused at once only when no worker of the version
has been ready within the *gone* bound (30 s by default), never because one heartbeat is late
on a busy machine; a version whose workers stopped cleanly (they leave the readiness set) is
refused at once. Otherwise the request is queued and its deadline decides.

Writes that a client library may retry are idempotent: redis-py sends a pipeline again when its
connection drops after the command went out, so the script records the request id (until the
request's deadline) and a second call for the same id queues nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared import keys

# KEYS: readiness set, request stream, the request's admission record.
# ARGV: oldest readiness expiry (ms) that still counts as live, max queue size (0: none),
#       header, data, milliseconds to keep the admission record.
ENQUEUE_LUA = """
if redis.call('EXISTS', KEYS[3]) == 1 then return 1 end
if redis.call('ZCOUNT', KEYS[1], ARGV[1], '+inf') == 0 then return -1 end
local max_queue = tonumber(ARGV[2])
if max_queue > 0 and redis.call('XLEN', KEYS[2]) >= max_queue then return -2 end
redis.call('XADD', KEYS[2], '*', 'h', ARGV[3], 'd', ARGV[4])
redis.call('SET', KEYS[3], '1', 'PX', ARGV[5])
return 1
"""

ADMITTED = 1
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
) -> AdmissionCall:
    """The script's keys and arguments for one request."""
    return AdmissionCall(
        keys=[
            keys.ready(model, version),
            keys.request_stream(model, version, priority),
            keys.admitted(model, request_id),
        ],
        args=[now_ms - gone_ms, max_queue_size, header, data, max(1, deadline_ms - now_ms)],
    )
