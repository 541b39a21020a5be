"""``shared.wire.deadlines``: who asked, and when a unary request or a stream is due."""

from __future__ import annotations

from shared.wire.deadlines import MAX_ASKED_MS, Deadline, asked_ms, plan, stream_due_ms

NOW = 1_000_000


def test_only_someone_asking_sets_a_deadline() -> None:
    assert asked_ms({}) == 0
    assert asked_ms({"timeout": 0}) == 0  # Triton's 0: no timeout
    assert asked_ms({"timeout": 2_500_000}) == 2_500
    assert asked_ms({"timeout": 1}) == 1  # rounded up, never to 0
    assert asked_ms({}, tenant_timeout_ms=4_000) == 4_000
    assert asked_ms({"timeout": 2_000_000}, tenant_timeout_ms=4_000) == 2_000
    assert asked_ms({"timeout": 9_000_000}, tenant_timeout_ms=4_000) == 4_000
    assert asked_ms({"timeout": 2**64}) == MAX_ASKED_MS
    assert asked_ms({"timeout": True}) == 0 and asked_ms({"timeout": "5"}) == 0


def test_a_unary_request_has_the_unary_bound_unless_someone_asked() -> None:
    assert plan(NOW, 0, False, 30_000, 60_000) == Deadline(NOW + 30_000)
    assert plan(NOW, 45_000, False, 30_000, 60_000) == Deadline(NOW + 45_000, asked_ms=45_000)


def test_a_stream_is_bounded_by_silence_not_by_age() -> None:
    bound = plan(NOW, 0, True, 30_000, 60_000)
    assert bound == Deadline(NOW + 60_000, silence_ms=60_000)
    # Responses 11 s apart: always due 60 s after the last, however long it has run.
    for last in range(NOW + 11_000, NOW + 3_600_000, 11_000):
        assert stream_due_ms(bound.deadline_ms, 60_000, 0, last) == last + 60_000
    assert stream_due_ms(bound.deadline_ms, 60_000, 0, 0) == NOW + 60_000  # nothing heard yet


def test_an_asked_end_still_cuts_a_stream() -> None:
    bound = plan(NOW, 2_000, True, 30_000, 60_000)
    assert bound == Deadline(NOW + 2_000, 60_000, NOW + 2_000, 2_000)
    assert stream_due_ms(bound.deadline_ms, 60_000, bound.end_by_ms, NOW + 1_500) == NOW + 2_000
    long = plan(NOW, 600_000, True, 30_000, 60_000)
    assert long.deadline_ms == NOW + 60_000  # the first response is due within the silence
    assert stream_due_ms(long.deadline_ms, 60_000, long.end_by_ms, NOW + 590_000) == NOW + 600_000


def test_a_request_without_a_silence_bound_keeps_its_deadline() -> None:
    assert stream_due_ms(NOW, 0, 0, NOW + 50_000) == NOW
