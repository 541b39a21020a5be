"""When a queued request may no longer wait: its deadline, and Triton's queue policy.

A request whose deadline has passed is answered with a timeout error and never sent. A request
past its queue timeout (set by the gateway from the model's queue policy and the request's
``timeout``) is answered the same way under REJECT; under DELAY it goes behind the other
requests of its level, and only its deadline bounds it from then on. ``scheduler.queueing.pending``
keeps both times in heaps, so finding what is due costs nothing per request still waiting.
"""

from __future__ import annotations

from shared.wire.envelope import RequestHeader

DEADLINE_PASSED = (
    "Request timeout expired: the request's deadline passed before it could be scheduled"
)
QUEUE_TIMEOUT = "Request timeout expired"


def queue_timeout_at(header: RequestHeader) -> float | None:
    """When the request's queue timeout passes (epoch ms), None when it has none."""
    if not header.queue_timeout_us:
        return None
    return header.enqueued_ms + header.queue_timeout_us / 1000
