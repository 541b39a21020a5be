"""Back-pressure at the front door: a cap on the inference requests one gateway process holds.

Beyond the cap a request is answered at once (503 with Retry-After) instead of joining a queue
the process cannot serve before the deadlines pass: its memory and its event loop stay bounded,
and Envoy or the client's retry finds a less loaded process. Counted per process because that
is what a process's memory and loop can carry.
"""

from __future__ import annotations

from shared import metrics
from shared.wire.errors import ConchError, ErrorCode


class InFlightLimit:
    def __init__(self, limit: int):
        # 0 or less: no cap.
        self.limit = limit
        self.count = 0

    def enter(self, model: str) -> None:
        """Take a slot or raise 503; every successful ``enter`` is paired with one ``leave``."""
        if 0 < self.limit <= self.count:
            metrics.record_rejected(None, model, "in_flight_limit")
            raise ConchError(
                ErrorCode.UNAVAILABLE,
                f"this gateway process already has {self.count} inference requests in flight, "
                f"its limit (CONCH_GATEWAY_MAX_IN_FLIGHT={self.limit}); retry shortly",
                retry_after_s=1,
            )
        self.count += 1

    def leave(self) -> None:
        self.count -= 1
