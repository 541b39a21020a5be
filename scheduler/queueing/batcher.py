"""Triton's dynamic batcher as a pure function: ``(pending, now, policy) -> decision``.

``pending`` is already in service order (priority, then arrival). The batch is the longest
prefix with one shape signature whose summed batch sizes fit ``max_batch_size``. Send rules, as in
Triton's ``DynamicBatchScheduler::GetDynamicBatch``:

1. a preferred size was reached and the oldest request has not waited ``max_queue_delay``:
   send the largest preferred prefix;
2. the delay has expired, the batch cannot grow, or the delay is 0: send everything that fits;
3. otherwise wait until the oldest request's delay expires (or something arrives).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class Batchable(Protocol):
    @property
    def batch_size(self) -> int: ...

    @property
    def shape_sig(self) -> str: ...

    @property
    def arrival_us(self) -> float: ...


@dataclass(frozen=True)
class BatchPolicy:
    max_batch_size: int
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int = 0
    # False: no dynamic batching configured; each request runs alone (Triton's default scheduler).
    enabled: bool = True


@dataclass(frozen=True)
class Decision:
    # How many requests from the head of ``pending`` to send now (0: none yet).
    take: int
    # When to decide again if nothing is sent (monotonic microseconds); None: on next arrival.
    wake_at_us: float | None = None


def decide(pending: Sequence[Batchable], now_us: float, policy: BatchPolicy) -> Decision:
    if not pending:
        return Decision(0)
    if policy.max_batch_size <= 0 or not policy.enabled:
        return Decision(1)
    signature = pending[0].shape_sig
    total = count = preferred_count = 0
    can_grow = True
    oldest = pending[0].arrival_us
    preferred = set(policy.preferred_batch_sizes)
    for request in pending:
        if request.shape_sig != signature or total + request.batch_size > policy.max_batch_size:
            can_grow = False
            break
        total += request.batch_size
        count += 1
        oldest = min(oldest, request.arrival_us)
        if total in preferred:
            preferred_count = count
    if count == 0:  # cannot happen for validated requests; never stall the queue on one
        return Decision(1)
    if total >= policy.max_batch_size:
        can_grow = False
    # As in Triton, a delay of 0 never "expires": preferred sizes still shape the batch.
    delay = policy.max_queue_delay_us
    expired = delay > 0 and now_us - oldest >= delay
    if preferred_count and not expired:
        return Decision(preferred_count)
    past_preferred = bool(preferred) and total >= max(preferred)
    if expired or not can_grow or delay == 0 or past_preferred:
        return Decision(count)
    return Decision(0, oldest + policy.max_queue_delay_us)
