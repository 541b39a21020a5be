"""The dynamic batcher's send rules, as in Triton's ``DynamicBatchScheduler::GetDynamicBatch``.

``decide(pending, now_us, policy)`` answers how many requests from the head of ``pending`` to send
now, or when to look again. ``pending`` is already in service order, so the batch is always a
prefix of it: one shape signature, summed batch sizes within ``max_batch_size``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from scheduler.queueing.batcher import BatchPolicy, Decision, decide

DELAY = 1_000  # microseconds


@dataclass(frozen=True)
class Req:
    batch_size: int = 1
    shape_sig: str = "INPUT0:16"
    arrival_us: float = 0.0


def reqs(*sizes: int, sig: str = "INPUT0:16", at: float = 0.0) -> list[Req]:
    return [Req(size, sig, at) for size in sizes]


def policy(
    max_batch_size: int = 8,
    preferred: tuple[int, ...] = (),
    delay_us: int = DELAY,
    enabled: bool = True,
) -> BatchPolicy:
    return BatchPolicy(max_batch_size, preferred, delay_us, enabled)


# --- nothing to do ----------------------------------------------------------------------------


def test_empty_queue_sends_nothing_and_waits_for_an_arrival() -> None:
    assert decide([], 0.0, policy()) == Decision(0, None)
    assert decide([], 10**9, policy(delay_us=0)) == Decision(0, None)


# --- rule 3: wait for the oldest request's delay ----------------------------------------------


def test_growing_batch_waits_until_the_oldest_request_has_waited_the_delay() -> None:
    pending = [Req(arrival_us=100.0), Req(arrival_us=400.0)]
    decision = decide(pending, 500.0, policy(delay_us=1_000))
    assert decision.take == 0
    assert decision.wake_at_us == 1_100.0


def test_wake_time_uses_the_oldest_request_not_the_head() -> None:
    # A later-arrived request may head the queue (higher priority); the delay runs from the
    # oldest request of the batch being formed.
    pending = [Req(arrival_us=400.0), Req(arrival_us=100.0)]
    assert decide(pending, 500.0, policy(delay_us=1_000)) == Decision(0, 1_100.0)


# --- rule 2: the delay has expired ------------------------------------------------------------


def test_expired_delay_sends_everything_that_fits() -> None:
    pending = reqs(1, 1, 1, at=0.0)
    assert decide(pending, 1_000.0, policy(delay_us=1_000)).take == 3
    assert decide(pending, 5_000.0, policy(delay_us=1_000)).take == 3


def test_one_microsecond_before_the_delay_still_waits() -> None:
    pending = reqs(1, 1, at=0.0)
    assert decide(pending, 999.0, policy(delay_us=1_000)) == Decision(0, 1_000.0)


def test_expired_delay_sends_only_up_to_max_batch_size() -> None:
    pending = reqs(3, 3, 3, at=0.0)
    assert decide(pending, 10_000.0, policy(max_batch_size=8)).take == 2


def test_expired_delay_with_preferred_sizes_sends_everything_that_fits() -> None:
    # The preferred prefix is only favoured before the delay expires.
    pending = reqs(1, 1, 1, at=0.0)
    assert decide(pending, 2_000.0, policy(preferred=(2,))).take == 3


# --- rule 1: a preferred size was reached -----------------------------------------------------


def test_preferred_size_reached_before_the_delay_sends_the_preferred_prefix() -> None:
    pending = reqs(1, 1, 1, at=0.0)
    assert decide(pending, 10.0, policy(preferred=(2,))).take == 2


def test_the_largest_preferred_prefix_is_sent() -> None:
    pending = reqs(1, 1, 1, 1, 1, at=0.0)
    assert decide(pending, 10.0, policy(preferred=(2, 4))).take == 4


def test_preferred_sizes_count_batch_sizes_not_requests() -> None:
    # Sizes 2 + 2 make the preferred 4 after two requests; 2 + 2 + 3 = 7 is not preferred.
    pending = reqs(2, 2, 3, at=0.0)
    assert decide(pending, 10.0, policy(preferred=(4,))).take == 2


def test_preferred_size_not_reached_waits() -> None:
    pending = reqs(1, 1, 1, at=0.0)
    decision = decide(pending, 10.0, policy(preferred=(4,)))
    assert decision == Decision(0, float(DELAY))


def test_a_batch_past_every_preferred_size_is_sent_at_once() -> None:
    # 3 then 3 + 3 = 6: preferred 4 is never the running total, but the batch is already past
    # the largest preferred size, so (as Triton) it is sent without waiting for the delay.
    pending = reqs(3, 3, at=0.0)
    assert decide(pending, 10.0, policy(preferred=(4,))).take == 2


def test_preferred_size_beyond_a_shape_change_does_not_count() -> None:
    pending = [Req(1), Req(1, "INPUT0:32"), Req(1)]
    # Only the first request can join the batch; it is not preferred, but the batch cannot grow.
    assert decide(pending, 10.0, policy(preferred=(2,))).take == 1


def test_delay_zero_still_prefers_a_preferred_batch_size() -> None:
    pending = reqs(1, 1, 1, 1, 1, 1, at=0.0)
    assert decide(pending, 0.0, policy(preferred=(2, 4), delay_us=0)).take == 4


# --- rule 2: the batch cannot grow ------------------------------------------------------------


def test_batch_at_max_batch_size_is_sent_at_once() -> None:
    pending = reqs(4, 4, at=0.0)
    assert decide(pending, 0.0, policy(max_batch_size=8)).take == 2


def test_next_request_overflowing_max_batch_size_sends_at_once() -> None:
    # 4 + 3 = 7 fits; 7 + 2 = 9 does not, so the batch of 7 cannot grow.
    pending = reqs(4, 3, 2, at=0.0)
    assert decide(pending, 0.0, policy(max_batch_size=8)).take == 2


def test_next_request_with_another_shape_sends_at_once() -> None:
    pending = [Req(1), Req(1), Req(1, "INPUT0:32"), Req(1)]
    assert decide(pending, 0.0, policy()).take == 2


def test_batch_never_skips_over_a_request_to_take_a_later_one() -> None:
    # Service order is the caller's: the third request matches the head's shape but stays behind.
    pending = [Req(1), Req(1, "INPUT0:32"), Req(1)]
    assert decide(pending, 10_000.0, policy()).take == 1


def test_single_request_at_max_batch_size_is_sent_at_once() -> None:
    assert decide(reqs(8), 0.0, policy(max_batch_size=8)).take == 1


def test_request_larger_than_max_batch_size_is_not_stalled() -> None:
    # Validation rejects these, but the batcher must never hold the queue on one.
    assert decide(reqs(9, 1), 0.0, policy(max_batch_size=8)).take == 1


def test_a_last_request_that_fits_exactly_completes_the_batch() -> None:
    pending = reqs(2, 2, 2, 2, 1, at=0.0)
    assert decide(pending, 0.0, policy(max_batch_size=8)).take == 4


# --- rule 2: delay 0 ---------------------------------------------------------------------------


def test_delay_zero_sends_at_once_everything_that_fits() -> None:
    pending = reqs(1, 1, 1)
    assert decide(pending, 0.0, policy(delay_us=0)) == Decision(3)


def test_delay_zero_still_respects_max_batch_size_and_shapes() -> None:
    pending = [*reqs(3, 3), *reqs(3)]
    assert decide(pending, 0.0, policy(max_batch_size=8, delay_us=0)).take == 2
    mixed = [Req(1), Req(1, "INPUT0:32")]
    assert decide(mixed, 0.0, policy(delay_us=0)).take == 1


# --- no batching -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "no_batching",
    [
        policy(max_batch_size=0),
        policy(max_batch_size=8, enabled=False),
        policy(max_batch_size=0, enabled=False),
    ],
    ids=["max_batch_size_0", "dynamic_batching_disabled", "both"],
)
def test_without_batching_requests_run_one_at_a_time(no_batching: BatchPolicy) -> None:
    pending = reqs(1, 1, 1, 1, at=0.0)
    assert decide(pending, 0.0, no_batching) == Decision(1)
    assert decide(pending[:1], 0.0, no_batching) == Decision(1)


def test_without_batching_a_request_is_sent_even_with_a_long_delay() -> None:
    assert decide(reqs(1), 0.0, policy(max_batch_size=8, delay_us=10**9, enabled=False)).take == 1


# --- order -------------------------------------------------------------------------------------


def test_the_batch_is_the_head_of_the_callers_order() -> None:
    # The batcher never reorders: whatever the caller put first (a higher priority) decides the
    # batch's shape and goes first, even when older requests of another shape wait behind it.
    urgent = Req(1, "INPUT0:32", arrival_us=900.0)
    older = reqs(1, 1, at=0.0)
    assert decide([urgent, *older], 900.0, policy()).take == 1
    # In the other order the two older requests batch together and the urgent one waits.
    assert decide([*older, urgent], 900.0, policy()).take == 2


def test_decide_is_pure() -> None:
    pending = reqs(1, 1, at=0.0)
    before = list(pending)
    first = decide(pending, 10.0, policy())
    again = decide(pending, 10.0, policy())
    assert first == again
    assert pending == before
