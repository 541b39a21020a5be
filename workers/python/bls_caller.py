"""What BLS calls inherit from the requests a Python model's ``execute`` is running.

Light on purpose (the model process imports it at start): the stub sets ``current`` around each
``execute``; ``workers.python.bls_client`` reads it when the model calls ``exec``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# How long a caller's list of children outlives the call's deadline (as the cancel keys do).
CHILD_GRACE_MS = 60_000


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


def queue_adoption(pipe: Any, caller: Caller, model: str, request_id: str, deadline_ms: int) -> int:
    """Record the call as a child of its callers, on a pipeline of the caller's (beside the
    call's submission: one round trip), and read whether each caller was cancelled already;
    the number of replies queued (``adopted`` reads them)."""
    if not caller.parents:
        return 0
    from shared.wire import keys  # not at import: the model process imports this module at start

    child = f"{model}\x00{request_id}"
    ttl_ms = max(1, deadline_ms - int(time.time() * 1000)) + CHILD_GRACE_MS
    for parent in caller.parents:
        pipe.sadd(keys.cancel_children(caller.model, parent), child)
        pipe.pexpire(keys.cancel_children(caller.model, parent), ttl_ms)
    for parent in caller.parents:
        pipe.exists(keys.cancel(caller.model, parent))
    return 3 * len(caller.parents)


def adopted(caller: Caller, answers: list[Any]) -> bool:
    """False when every caller was cancelled already: the call is then to be marked cancelled
    itself (a canceller that read the children before they were written did not see it) and
    answered CANCELLED. A caller cancelled after the read sees the child and cancels it (it
    was written before the read, on the same connection)."""
    return not caller.parents or not all(answers[2 * len(caller.parents) :])


async def adopt(r: Any, caller: Caller, model: str, request_id: str, deadline_ms: int) -> bool:
    """``queue_adoption`` on a pipeline of its own (a call whose submission is not a pipeline's:
    a step of a sequence model)."""
    if not caller.parents:
        return True
    async with r.pipeline(transaction=False) as pipe:
        queue_adoption(pipe, caller, model, request_id, deadline_ms)
        return adopted(caller, await pipe.execute())


# One batch at a time per model process.
current = Caller()
