"""A request of a decoupled batch that is still streaming: its clocks and when it is due.

A stream is due at the silence bound after its last response (``shared.wire.deadlines``),
not at its age, unless someone asked for a deadline.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.wire import deadlines
from shared.wire.envelope import InferRequest
from shared.wire.errors import ConchError, ErrorCode


@dataclass
class OpenStream:
    """A request of a decoupled batch whose final response has not been sent yet."""

    request: InferRequest
    seq: int = 0
    cancelled: bool = False
    # When its last response was sent (ms since epoch; 0: none yet): the silence bound's clock.
    last_ms: float = 0.0
    last_ns: int = 0  # the same on perf_counter_ns: the per-response statistics' clock

    def due_ms(self) -> float:
        r = self.request
        return deadlines.stream_due_ms(r.deadline_ms, r.silence_ms, r.end_by_ms, self.last_ms)

    def late_error(self, now_ms: float) -> ConchError:
        r = self.request
        if r.silence_ms and not (r.end_by_ms and now_ms >= r.end_by_ms):
            message = (
                f"Request timeout expired: model '{r.model}' sent no response for "
                f"{r.silence_ms} ms (the stream silence bound, "
                "CONCH_GATEWAY_STREAM_SILENCE_TIMEOUT_MS)"
            )
        else:
            message = (
                "Request timeout expired: the deadline passed while the model was streaming "
                "responses"
            )
        return ConchError(ErrorCode.DEADLINE_EXCEEDED, message)
