"""The queue ticket of one request: its priority level, the queue size limit and its time in the
queue, from the request's parameters and the model's queue policy with Triton's semantics. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.model_config import ModelConfig
from shared.wire.errors import invalid


@dataclass(frozen=True)
class QueueTicket:
    priority: int
    max_queue_size: int
    # Microseconds the request may wait in the queue; 0 means no queue timeout.
    timeout_us: int
    delay_on_timeout: bool


def _int_param(parameters: dict[str, Any], name: str) -> int:
    value = parameters.get(name, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise invalid(f"request parameter '{name}' must be an integer >= 0, got {value!r}")
    return value


def queue_ticket(
    config: ModelConfig, parameters: dict[str, Any], default_priority: int = 0
) -> QueueTicket:
    """Priority 0 or one past the model's levels means the model's default level, as in Triton;
    a request's timeout may only lower the policy's, and only where the policy allows it.
    ``default_priority`` (the tenant's) stands in for a request without a priority."""
    requested = _int_param(parameters, "priority") or default_priority
    timeout = _int_param(parameters, "timeout")
    batching = config.dynamic_batching
    levels = batching.priority_levels if batching else 0
    priority = requested if 1 <= requested <= levels else config.default_priority()
    if batching is None:
        return QueueTicket(priority, 0, timeout, False)
    policy = batching.queue_policy(priority)
    timeout_us = policy.default_timeout_microseconds
    if timeout and policy.allow_timeout_override:
        timeout_us = min(timeout, timeout_us) if timeout_us else timeout
    return QueueTicket(
        priority=priority,
        max_queue_size=policy.max_queue_size,
        timeout_us=timeout_us,
        delay_on_timeout=policy.timeout_action == "DELAY",
    )
