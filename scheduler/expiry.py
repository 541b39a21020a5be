"""When a queued request may no longer wait: its deadline, and Triton's queue policy.

A request whose deadline has passed is answered with a timeout error and never sent. A request
past its queue timeout (set by the gateway from the model's queue policy and the request's
``timeout``) is answered the same way under REJECT; under DELAY it stays, behind the other
requests of its level, and only its deadline bounds it from then on.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.pending import Pending
from shared.envelope import RequestHeader

DEADLINE_PASSED = (
    "Request timeout expired: the request's deadline passed before it could be scheduled"
)
QUEUE_TIMEOUT = "Request timeout expired"


def sort_out(
    items: list[Pending], now_ms: float
) -> tuple[list[Pending], list[tuple[Pending, str]], bool]:
    """Split the queue into the requests that stay and the expired ones, each with its message.

    A delayed request has its sort key moved behind its level, in place; the third value says
    whether any was, so the caller re-sorts what stays.
    """
    expired: list[tuple[Pending, str]] = []
    keep: list[Pending] = []
    moved = False
    for item in items:
        h = item.header
        if now_ms >= h.deadline_ms:
            expired.append((item, DEADLINE_PASSED))
        elif (
            h.queue_timeout_us
            and item.sort_key[1] == 0
            and (now_ms >= h.enqueued_ms + h.queue_timeout_us / 1000)
        ):
            if h.delay_on_timeout:
                item.sort_key = (item.sort_key[0], 1, item.sort_key[2])
                moved = True
                keep.append(item)
            else:
                expired.append((item, QUEUE_TIMEOUT))
        else:
            keep.append(item)
    return keep, expired, moved


def next_expiry_s(items: Sequence[Pending], now_ms: float) -> float | None:
    """Seconds until the earliest deadline or queue timeout among the requests (None: none)."""
    if not items:
        return None
    soonest = min(_expiry_ms(p.header) for p in items)
    return max(0.0, (soonest - now_ms) / 1000) + 0.0005


def _expiry_ms(header: RequestHeader) -> float:
    expiry = float(header.deadline_ms)
    if header.queue_timeout_us and not header.delay_on_timeout:
        expiry = min(expiry, header.enqueued_ms + header.queue_timeout_us / 1000)
    return expiry
