"""What BLS calls inherit from the requests a Python model's ``execute`` is running.

Light on purpose (the model process imports it at start): the stub sets ``current`` around each
``execute``; ``workers.python.bls_client`` reads it when the model calls ``exec``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Caller:
    deadline_ms: int = 0
    priority: int = 0
    tenant: str = ""
    # The calling model and its requests: a BLS call is cancelled with them.
    model: str = ""
    parents: tuple[str, ...] = ()


def batch_caller(callers: Sequence[Caller], model: str = "", parents: Sequence[str] = ()) -> Caller:
    """A batch's caller: its earliest deadline, its most urgent priority, its first tenant, and
    its requests (``parents`` of ``model``)."""
    deadlines = [c.deadline_ms for c in callers if c.deadline_ms]
    priorities = [c.priority for c in callers if c.priority]
    return Caller(
        deadline_ms=min(deadlines) if deadlines else 0,
        priority=min(priorities) if priorities else 0,
        tenant=next((c.tenant for c in callers if c.tenant), ""),
        model=model,
        parents=tuple(parents),
    )


# One batch at a time per model process.
current = Caller()
