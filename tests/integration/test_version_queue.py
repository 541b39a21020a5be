"""VersionQueue against a real redis-server: batching, dispatch, deadlines, queue policy, backlog.

Requests are real stream entries, delivered to the scheduler group as the scheduler service does,
then handed to the queue; the queue's own loop (``run``) forms and dispatches batches. What the
tests look at is what the rest of the mesh sees: entries in the batch stream, replies in the reply
stream, and what is left in the request streams.
"""

from __future__ import annotations

import asyncio
import time

from shared.wire import envelope, keys
from shared.wire.errors import ErrorCode
from tests.queue_harness import (
    MODEL,
    REPLY_TO,
    VERSION,
    force_stop,
    model_config,
)
from tests.waiting import eventually

# --- batches and dispatch ----------------------------------------------------------------------


async def test_queued_requests_form_one_batch_in_arrival_order(harness) -> None:
    h = harness(model_config(max_batch_size=8))
    for rid in ("a", "b", "c"):
        await h.submit(rid)
    h.start()
    assert await h.wait_batches(1) == [["a", "b", "c"]]
    [batch] = await h.batches()
    assert (batch.model, batch.version) == (MODEL, VERSION)
    assert len(batch.queue_ns) == 3 and all(ns >= 0 for ns in batch.queue_ns)
    assert abs(batch.formed_ms - time.time() * 1000) < 5_000
    assert batch.batch_id


async def test_the_batch_carries_the_request_payloads_unchanged(harness) -> None:
    h = harness()
    await h.submit("a", batch_size=2)
    h.start()
    await h.wait_batches(1)
    [batch] = await h.batches()
    request = envelope.decode_request(batch.requests[0])
    assert request.inputs[0].shape == [2, 16]
    assert request.inputs[0].data == bytes(128)


async def test_dispatch_acks_and_deletes_the_request_entries(harness, aredis) -> None:
    h = harness()
    for rid in ("a", "b"):
        await h.submit(rid)
    h.start()
    await h.wait_batches(1)
    stream = keys.request_stream(MODEL, VERSION, 1)
    assert await aredis.xlen(stream) == 0
    assert (await aredis.xpending(stream, keys.SCHEDULER_GROUP))["pending"] == 0
    assert not await h.still_queued("a")
    assert len(h.queue) == 0
    assert (h.queue.batches, h.queue.batched_requests) == (1, 2)


async def test_batches_are_split_at_max_batch_size(harness) -> None:
    h = harness(model_config(max_batch_size=4))
    for n in range(10):
        await h.submit(f"r{n}")
    h.start()
    got = await h.wait_batches(3)
    assert got == [[f"r{n}" for n in range(4)], [f"r{n}" for n in range(4, 8)], ["r8", "r9"]]


async def test_batch_sizes_add_up_to_at_most_max_batch_size(harness) -> None:
    h = harness(model_config(max_batch_size=8))
    await h.submit("a", batch_size=3)
    await h.submit("b", batch_size=3)
    await h.submit("c", batch_size=3)
    h.start()
    assert await h.wait_batches(2) == [["a", "b"], ["c"]]


async def test_a_different_shape_starts_a_new_batch_in_order(harness) -> None:
    h = harness()
    await h.submit("a")
    await h.submit("b")
    await h.submit("c", shape_sig="INPUT0:32")
    await h.submit("d")
    h.start()
    assert await h.wait_batches(3) == [["a", "b"], ["c"], ["d"]]


async def test_higher_priority_requests_are_served_first(harness) -> None:
    h = harness(model_config(max_batch_size=2, priority_levels=2))
    await h.submit("low-1", priority=2)
    await h.submit("low-2", priority=2)
    await h.submit("high", priority=1)
    h.start()
    assert await h.wait_batches(2) == [["high", "low-1"], ["low-2"]]


async def test_without_dynamic_batching_each_request_runs_alone(harness) -> None:
    h = harness(model_config(max_batch_size=8, batching=False))
    for rid in ("a", "b", "c"):
        await h.submit(rid)
    h.start()
    assert await h.wait_batches(3) == [["a"], ["b"], ["c"]]


async def test_the_same_entry_added_twice_is_batched_once(harness) -> None:
    h = harness()
    header = await h.submit("a")
    stream, entry_id = h.entries["a"]
    h.queue.add(header, stream, entry_id, b"duplicate")
    assert len(h.queue) == 1
    h.start()
    assert await h.wait_batches(1) == [["a"]]


async def test_equal_entry_ids_in_two_priority_streams_are_two_requests(harness) -> None:
    # Entry ids are per stream: the same id may appear in each priority level's stream.
    h = harness(model_config(priority_levels=2))
    first = await h.submit("p1", priority=1, add=False)
    second = await h.submit("p2", priority=2, add=False)
    shared_id = b"1-1"
    h.queue.add(first, h.entries["p1"][0], shared_id, b"payload-1")
    h.queue.add(second, h.entries["p2"][0], shared_id, b"payload-2")
    assert len(h.queue) == 2


async def test_requests_arriving_while_running_are_batched(harness) -> None:
    h = harness()
    h.start()
    await asyncio.sleep(0.02)
    await h.submit("late")
    assert await h.wait_batches(1) == [["late"]]


# --- queue delay and preferred sizes -------------------------------------------------------------


async def test_a_batch_waits_for_the_queue_delay_to_grow(harness) -> None:
    h = harness(model_config(delay_us=300_000))
    started = time.monotonic()
    await h.submit("a")
    h.start()
    await asyncio.sleep(0.05)
    await h.submit("b")
    await asyncio.sleep(0.05)
    assert await h.batch_ids() == []
    assert await h.wait_batches(1) == [["a", "b"]]
    assert time.monotonic() - started >= 0.25


async def test_a_preferred_size_is_sent_before_the_delay(harness) -> None:
    h = harness(model_config(delay_us=10_000_000, preferred=(2,)))
    await h.submit("a")
    h.start()
    await asyncio.sleep(0.03)
    assert await h.batch_ids() == []
    await h.submit("b")
    assert await h.wait_batches(1, within=2.0) == [["a", "b"]]


async def test_the_delay_runs_from_admission_not_from_the_schedulers_read(harness) -> None:
    # Admitted 1.5 s before the scheduler read it, with a 2 s delay: sent about 0.5 s after the
    # read (Triton's delay runs from the request's arrival), not 2 s after.
    h = harness(model_config(delay_us=2_000_000))
    await h.submit("a", enqueued_ago_ms=1_500)
    h.start()
    assert await h.wait_batches(1, within=1.2) == [["a"]]


async def test_a_request_waits_its_delay_and_no_longer(harness) -> None:
    h = harness(model_config(delay_us=300_000))
    started = time.monotonic()  # the delay runs from admission, inside submit
    await h.submit("a")
    h.start()
    await asyncio.sleep(0.2)
    assert await h.batch_ids() == []
    assert await h.wait_batches(1, within=2.0) == [["a"]]
    # Measured on another clock than the admission stamp (monotonic, not wall): a few ms slack.
    assert time.monotonic() - started >= 0.3 - 0.005


async def test_a_full_batch_is_sent_before_the_delay(harness) -> None:
    h = harness(model_config(max_batch_size=2, delay_us=10_000_000))
    await h.submit("a")
    await h.submit("b")
    h.start()
    assert await h.wait_batches(1, within=2.0) == [["a", "b"]]


# --- deadlines ---------------------------------------------------------------------------------


async def test_an_expired_deadline_is_answered_and_never_dispatched(harness) -> None:
    h = harness()
    await h.submit("late", deadline_in_ms=-1)
    await h.submit("ok")
    h.start()
    assert await h.wait_batches(1) == [["ok"]]
    [reply] = await h.wait_replies(1)
    assert reply.id == "late"
    assert (reply.model, reply.version) == (MODEL, VERSION)
    assert reply.error_code == ErrorCode.UNAVAILABLE.value
    assert reply.error.startswith("Request timeout expired")
    assert reply.outputs == []
    assert not await h.still_queued("late")
    await asyncio.sleep(0.05)
    assert await h.batch_ids() == [["ok"]]


async def test_a_deadline_passing_while_waiting_for_a_batch_is_answered(harness) -> None:
    h = harness(model_config(delay_us=10_000_000))
    await h.submit("a", deadline_in_ms=150)
    h.start()
    [reply] = await h.wait_replies(1, within=2.0)
    assert reply.id == "a"
    assert reply.error.startswith("Request timeout expired")
    assert await h.batch_ids() == []
    assert not await h.still_queued("a")
    assert len(h.queue) == 0


async def test_error_replies_refresh_the_reply_streams_expiry(harness, aredis) -> None:
    h = harness()
    await h.submit("late", deadline_in_ms=-1)
    h.start()
    await h.wait_replies(1)
    assert await aredis.pttl(REPLY_TO) > 0


# --- queue policy: REJECT and DELAY ------------------------------------------------------------


async def test_reject_queue_timeout_answers_request_timeout_expired(harness) -> None:
    h = harness()
    await h.submit("stale", enqueued_ago_ms=50, queue_timeout_us=1_000)
    await h.submit("fresh", queue_timeout_us=10_000_000)
    h.start()
    assert await h.wait_batches(1) == [["fresh"]]
    [reply] = await h.wait_replies(1)
    assert reply.id == "stale"
    assert reply.error == "Request timeout expired"  # Triton's exact message
    assert reply.error_code == ErrorCode.UNAVAILABLE.value
    assert not await h.still_queued("stale")


async def test_reject_queue_timeout_while_waiting_for_a_batch(harness) -> None:
    h = harness(model_config(delay_us=10_000_000))
    await h.submit("a", queue_timeout_us=150_000)
    h.start()
    [reply] = await h.wait_replies(1, within=2.0)
    assert (reply.id, reply.error) == ("a", "Request timeout expired")
    assert await h.batch_ids() == []


async def test_delay_queue_timeout_moves_a_request_behind_the_others(harness) -> None:
    h = harness(model_config(max_batch_size=2))
    await h.submit("slow", enqueued_ago_ms=50, queue_timeout_us=1_000, delay_on_timeout=True)
    await h.submit("b")
    await h.submit("c")
    h.start()
    assert await h.wait_batches(2) == [["b", "c"], ["slow"]]
    assert await h.replies() == []  # delayed, never rejected


async def test_a_delayed_request_joins_a_batch_behind_the_others(harness) -> None:
    h = harness(model_config(max_batch_size=8))
    await h.submit("slow", enqueued_ago_ms=50, queue_timeout_us=1_000, delay_on_timeout=True)
    await h.submit("b")
    h.start()
    assert await h.wait_batches(1) == [["b", "slow"]]


async def test_delay_keeps_a_request_ahead_of_lower_priority_levels(harness) -> None:
    h = harness(model_config(max_batch_size=1, priority_levels=2))
    await h.submit("low", priority=2)
    await h.submit(
        "high-delayed",
        priority=1,
        enqueued_ago_ms=50,
        queue_timeout_us=1_000,
        delay_on_timeout=True,
    )
    h.start()
    assert await h.wait_batches(2) == [["high-delayed"], ["low"]]


async def test_a_delayed_request_is_still_bound_by_its_deadline(harness) -> None:
    h = harness(model_config(delay_us=10_000_000))
    await h.submit(
        "a", enqueued_ago_ms=50, queue_timeout_us=1_000, delay_on_timeout=True, deadline_in_ms=150
    )
    h.start()
    [reply] = await h.wait_replies(1, within=2.0)
    assert reply.id == "a"
    assert reply.error.startswith("Request timeout expired")
    assert await h.batch_ids() == []


# --- backlog: batches held back while the workers have enough queued -----------------------------


async def test_batches_are_held_back_while_the_backlog_is_full_and_grow_meanwhile(
    harness, aredis
) -> None:
    # One instance, no extra queued batch: the limit is one batch in the stream.
    h = harness(model_config(max_batch_size=8), queued_per_instance=0)
    await h.submit("first")
    h.start()
    assert await h.wait_batches(1) == [["first"]]
    for rid in ("b", "c", "d"):
        await h.submit(rid)
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.05)
    assert await h.batch_ids() == [["first"]]  # held back: the workers have enough queued
    assert all([await h.still_queued(rid) for rid in ("b", "c", "d")])
    # A worker takes the batch (ack + delete): capacity frees and the grown batch goes.
    [(first_id, _)] = await aredis.xrange(h.queue.batch_stream)
    await aredis.xdel(h.queue.batch_stream, first_id)
    got = await eventually(h.batch_ids, lambda b: len(b) >= 1 and b[0] != ["first"])
    assert got == [["b", "c", "d"]]


async def test_the_backlog_limit_grows_with_live_instances(harness) -> None:
    config = model_config(max_batch_size=1)
    h = harness(config, queued_per_instance=0)
    h.queue.update(config, instances=3)
    for rid in ("a", "b", "c", "d"):
        await h.submit(rid)
    h.start()
    assert await h.wait_batches(3) == [["a"], ["b"], ["c"]]
    await asyncio.sleep(0.05)
    assert len(await h.batch_ids()) == 3  # the fourth waits for capacity
    assert await h.still_queued("d")


async def test_a_held_request_still_expires(harness, aredis) -> None:
    h = harness(model_config(max_batch_size=8), queued_per_instance=0)
    await h.submit("first")
    h.start()
    await h.wait_batches(1)
    await h.submit("doomed", deadline_in_ms=100)
    [reply] = await h.wait_replies(1, within=2.0)
    assert reply.id == "doomed"
    assert await h.batch_ids() == [["first"]]


async def test_a_request_arriving_while_held_expires_at_its_deadline(harness, aredis) -> None:
    """A batch is held for capacity with the backlog poll 30 s away: a request due in 100 ms
    that arrives meanwhile is answered at its deadline, and the rest of the held batch goes when
    the finished batch is announced."""
    h = harness(model_config(max_batch_size=8), queued_per_instance=0, backlog_poll_us=30_000_000)
    await h.submit("first")
    h.start()
    await h.wait_batches(1)
    await h.submit("patient")
    await asyncio.sleep(0.05)
    await h.submit("doomed", deadline_in_ms=100)
    [reply] = await h.wait_replies(1, within=5.0)
    assert (reply.id, reply.error_code) == ("doomed", ErrorCode.UNAVAILABLE.value)
    assert await h.batch_ids() == [["first"]]
    assert await h.still_queued("patient")
    [(first_id, _)] = await aredis.xrange(h.queue.batch_stream)
    await aredis.xdel(h.queue.batch_stream, first_id)
    h.queue.on_batch_done()  # the worker's announcement
    got = await eventually(h.batch_ids, lambda b: len(b) >= 1 and b[0] != ["first"])
    assert got == [["patient"]]


async def test_a_new_queue_respects_a_backlog_already_in_the_stream(harness, aredis) -> None:
    h = harness(model_config(max_batch_size=8), queued_per_instance=0)
    await aredis.xadd(h.queue.batch_stream, {keys.FIELD_DATA: b"a batch a worker has not taken"})
    await h.submit("a")
    h.start()
    await asyncio.sleep(0.1)
    assert await aredis.xlen(h.queue.batch_stream) == 1


# --- stopping ----------------------------------------------------------------------------------


async def test_run_stops_when_cancelled(harness) -> None:
    # Held back with no poll delay: the loop is one XLEN round trip after another.
    h = harness(model_config(max_batch_size=1), queued_per_instance=0, backlog_poll_us=0)
    await h.submit("first")
    h.start()
    assert await h.wait_batches(1) == [["first"]]
    await h.submit("held")
    stuck = 0
    attempts = 30  # a cancel is lost about one time in three here; all 30 going through is rare
    for attempt in range(attempts):
        assert h.task is not None
        await asyncio.sleep(0.0005 * (attempt % 5))
        if not await force_stop(h.task, grace=0.05):
            stuck += 1
        h.start()
    assert stuck == 0, f"{stuck} of {attempts} cancellations were lost"


# --- answer_errors -------------------------------------------------------------------------------


async def test_answer_errors_replies_and_removes_the_entries(harness, aredis) -> None:
    h = harness()
    a = await h.submit("a", add=False)
    b = await h.submit("b", add=False)
    items = [(a, *h.entries["a"]), (b, *h.entries["b"])]
    await h.queue.answer_errors(items, ["first problem", "second problem"], ErrorCode.INTERNAL)
    replies = await h.replies()
    assert [(r.id, r.error_code, r.error) for r in replies] == [
        ("a", "INTERNAL", "first problem"),
        ("b", "INTERNAL", "second problem"),
    ]
    stream = keys.request_stream(MODEL, VERSION, 1)
    assert await aredis.xlen(stream) == 0
    assert (await aredis.xpending(stream, keys.SCHEDULER_GROUP))["pending"] == 0
