"""The queue ticket: Triton's request priority and timeout semantics.

A request's ``priority`` 0, or one past the model's priority levels, means the model's default
level; a request's ``timeout`` (microseconds) may only lower the queue policy's default timeout,
and only where the policy has ``allow_timeout_override``.
"""

from __future__ import annotations

from typing import Any

import pytest

from shared.model_config import ModelConfig, parse_pbtxt
from shared.wire.errors import ConchError, ErrorCode
from shared.wire.queue_ticket import QueueTicket, queue_ticket

HEAD = """
name: "m"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def config(batching: str | None = None) -> ModelConfig:
    return parse_pbtxt(
        HEAD + (f"dynamic_batching {{ {batching} }}" if batching is not None else "")
    )


PRIORITIES = config(
    """
    priority_levels: 3
    default_priority_level: 2
    default_queue_policy {
      timeout_action: REJECT
      default_timeout_microseconds: 5000
      allow_timeout_override: true
      max_queue_size: 10
    }
    priority_queue_policy {
      key: 1
      value {
        timeout_action: DELAY
        default_timeout_microseconds: 100
        allow_timeout_override: false
        max_queue_size: 3
      }
    }
    """
)


# --- priority ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("requested", "level"), [(1, 1), (2, 2), (3, 3)])
def test_priority_within_the_levels_is_kept(requested: int, level: int) -> None:
    assert queue_ticket(PRIORITIES, {"priority": requested}).priority == level


@pytest.mark.parametrize("requested", [0, 4, 1000])
def test_priority_zero_or_past_the_levels_means_the_default_level(requested: int) -> None:
    assert queue_ticket(PRIORITIES, {"priority": requested}).priority == 2


def test_no_priority_parameter_means_the_default_level() -> None:
    assert queue_ticket(PRIORITIES, {}).priority == 2


def test_default_level_defaults_to_the_lowest_priority() -> None:
    # Triton: default_priority_level unset with priority_levels set -> the last (lowest) level.
    cfg = config("priority_levels: 4")
    assert queue_ticket(cfg, {}).priority == 4
    assert queue_ticket(cfg, {"priority": 1}).priority == 1


def test_without_priority_levels_every_request_is_level_1() -> None:
    cfg = config("max_queue_delay_microseconds: 100")
    for requested in (0, 1, 2, 7):
        assert queue_ticket(cfg, {"priority": requested}).priority == 1


def test_without_dynamic_batching_every_request_is_level_1() -> None:
    assert queue_ticket(config(None), {"priority": 3}).priority == 1


# --- queue policy per level ----------------------------------------------------------------------


def test_the_levels_own_policy_applies() -> None:
    ticket = queue_ticket(PRIORITIES, {"priority": 1})
    assert ticket == QueueTicket(
        priority=1, max_queue_size=3, timeout_us=100, delay_on_timeout=True
    )


def test_levels_without_their_own_policy_get_the_default_policy() -> None:
    for level in (2, 3):
        ticket = queue_ticket(PRIORITIES, {"priority": level})
        assert ticket == QueueTicket(
            priority=level, max_queue_size=10, timeout_us=5000, delay_on_timeout=False
        )


def test_an_empty_dynamic_batching_block_has_no_limits() -> None:
    assert queue_ticket(config(""), {}) == QueueTicket(1, 0, 0, False)


# --- timeout -----------------------------------------------------------------------------------


def test_a_shorter_request_timeout_overrides_where_allowed() -> None:
    assert queue_ticket(PRIORITIES, {"priority": 2, "timeout": 1200}).timeout_us == 1200


def test_a_longer_request_timeout_cannot_raise_the_policys() -> None:
    assert queue_ticket(PRIORITIES, {"priority": 2, "timeout": 999_999}).timeout_us == 5000


def test_request_timeout_is_ignored_where_override_is_not_allowed() -> None:
    assert queue_ticket(PRIORITIES, {"priority": 1, "timeout": 10}).timeout_us == 100


def test_request_timeout_0_keeps_the_policys() -> None:
    assert queue_ticket(PRIORITIES, {"priority": 2, "timeout": 0}).timeout_us == 5000


def test_request_timeout_applies_when_the_policy_has_none() -> None:
    cfg = config("default_queue_policy { allow_timeout_override: true }")
    assert queue_ticket(cfg, {"timeout": 250}).timeout_us == 250
    assert queue_ticket(cfg, {}).timeout_us == 0


def test_request_timeout_without_override_and_without_policy_timeout_is_ignored() -> None:
    cfg = config("max_queue_delay_microseconds: 100")
    assert queue_ticket(cfg, {"timeout": 250}).timeout_us == 0


def test_without_dynamic_batching_the_request_timeout_is_kept() -> None:
    ticket = queue_ticket(config(None), {"timeout": 700})
    assert ticket == QueueTicket(
        priority=1, max_queue_size=0, timeout_us=700, delay_on_timeout=False
    )


def test_timeout_and_priority_from_tritonclient_parameters() -> None:
    """tritonclient sends priority and timeout as request parameters (see test_http_codec)."""
    ticket = queue_ticket(PRIORITIES, {"priority": 3, "timeout": 40, "custom": "x"})
    assert (ticket.priority, ticket.timeout_us, ticket.max_queue_size) == (3, 40, 10)


# --- bad parameters ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["priority", "timeout"])
@pytest.mark.parametrize("value", [-1, "1", 1.5, True, None, [1]])
def test_bad_priority_or_timeout_is_invalid_arg_naming_the_parameter(name: str, value: Any) -> None:
    with pytest.raises(ConchError) as exc_info:
        queue_ticket(PRIORITIES, {name: value})
    assert exc_info.value.code is ErrorCode.INVALID_ARG
    assert f"'{name}'" in exc_info.value.message
    assert repr(value) in exc_info.value.message


# --- a tenant's default priority -----------------------------------------------------------------


def test_the_tenants_priority_stands_in_for_a_request_without_one() -> None:
    assert queue_ticket(PRIORITIES, {}, default_priority=3).priority == 3
    assert queue_ticket(PRIORITIES, {"priority": 0}, default_priority=3).priority == 3


def test_a_requests_own_priority_wins_over_the_tenants() -> None:
    assert queue_ticket(PRIORITIES, {"priority": 1}, default_priority=3).priority == 1


def test_a_tenants_priority_past_the_levels_means_the_models_default() -> None:
    assert queue_ticket(PRIORITIES, {}, default_priority=9).priority == 2


def test_the_tenants_priority_selects_that_levels_queue_policy() -> None:
    ticket = queue_ticket(PRIORITIES, {}, default_priority=1)
    assert (ticket.max_queue_size, ticket.timeout_us, ticket.delay_on_timeout) == (3, 100, True)
