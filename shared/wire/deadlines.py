"""Deadlines only where someone asked, as in Triton: pure decisions the gateway and workers share.

Who may ask: the client (Triton's ``timeout`` request parameter, in microseconds; a gRPC
deadline on the call, which gRPC itself enforces) and the operator (a tenant's ``timeout_ms``).
The model's queue policy (``default_timeout_microseconds``) bounds the wait in the queue, as
Triton's does (``shared.wire.queue_ticket``). Nobody else cuts a request by its age:

- a unary request that nobody bounded is answered by the unary bound
  (``CONCH_GATEWAY_DEFAULT_TIMEOUT_MS``): the mesh's promise that every request is answered;
- a stream (decoupled responses, SSE, ``ModelStreamInfer``) is bounded by silence: it ends when
  no response came for ``CONCH_GATEWAY_STREAM_SILENCE_TIMEOUT_MS``, however long it has run.

A request's envelope carries ``deadline_ms`` (the unary deadline; for a stream, when its first
response is due), ``silence_ms`` (0: not bounded by silence) and ``end_by_ms`` (a stream's asked
deadline, 0: none). Schedulers expire queued entries at ``deadline_ms``; a worker streaming
responses ends a request at :func:`stream_due_ms`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# An asked timeout is clamped to this (Triton's is a uint64 of microseconds; Redis key lifetimes
# derived from the deadline must stay representable).
MAX_ASKED_MS = 7 * 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class Deadline:
    """When a request is due, and why (for the error that names the bound)."""

    deadline_ms: int
    silence_ms: int = 0
    end_by_ms: int = 0
    # The bound someone asked for (0: nobody; the unary or silence bound applies).
    asked_ms: int = 0


def asked_ms(parameters: dict[str, Any], tenant_timeout_ms: int = 0) -> int:
    """The tightest bound someone asked for, in ms (0: nobody asked). The client's ``timeout``
    is in microseconds (0 or absent: none); its type was checked by the queue ticket."""
    asked = [min(int(tenant_timeout_ms), MAX_ASKED_MS)] if tenant_timeout_ms > 0 else []
    timeout = parameters.get("timeout")
    if isinstance(timeout, int) and not isinstance(timeout, bool) and timeout > 0:
        asked.append(min(max(1, -(-timeout // 1000)), MAX_ASKED_MS))
    return min(asked) if asked else 0


def plan(now_ms: int, asked: int, stream: bool, unary_ms: int, silence_ms: int) -> Deadline:
    """A unary request: the asked bound, else the unary bound. A stream: the asked bound as its
    end, and its first response due within the silence bound."""
    if not stream:
        return Deadline(now_ms + (asked or unary_ms), asked_ms=asked)
    end_by = now_ms + asked if asked else 0
    first = now_ms + silence_ms
    return Deadline(min(first, end_by) if end_by else first, silence_ms, end_by, asked)


def stream_due_ms(deadline_ms: int, silence_ms: int, end_by_ms: int, last_ms: float) -> float:
    """When a streaming request is ended: ``deadline_ms`` until its first response (``last_ms``
    0), then the silence bound after its last response, never past an asked end."""
    if not silence_ms:
        return deadline_ms
    due = max(float(deadline_ms), last_ms + silence_ms) if last_ms else float(deadline_ms)
    return min(due, float(end_by_ms)) if end_by_ms else due
