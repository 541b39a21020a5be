"""A gateway process's per-request metrics, written once per loop turn
(``gateway.core.request_tally``): the same series as one write per request, and nothing lost."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prometheus_client import REGISTRY, CollectorRegistry, Histogram

from gateway.core.request_tally import RequestTally, observe_many
from shared.metrics.families import LATENCY_BUCKETS
from tests.multiprocess_metrics import families_after_children, gateway_request_counts

ROOT = Path(__file__).resolve().parents[2]

# On bucket bounds, between them, zero, beyond the last bound (+Inf), repeated.
AMOUNTS = [0.0, 0.0005, 0.0005, 0.0006, 0.001, 0.0042, 0.0042, 0.01, 0.3, 7.0, 31.0, 100.0]


def _samples(histogram: Histogram) -> list[tuple[str, dict[str, str], float]]:
    return [
        (s.name, s.labels, s.value)
        for f in histogram.collect()
        for s in f.samples
        if not s.name.endswith("_created")
    ]


def test_observing_in_bulk_reads_as_observing_one_by_one() -> None:
    registry = CollectorRegistry()
    one = Histogram("one_by_one", "d", ["m"], buckets=LATENCY_BUCKETS, registry=registry)
    bulk = Histogram("in_bulk", "d", ["m"], buckets=LATENCY_BUCKETS, registry=registry)
    for amount in AMOUNTS:
        one.labels("x").observe(amount)
    observe_many(bulk.labels("x"), AMOUNTS)
    observe_many(bulk.labels("x"), [0.002])  # a lone amount takes observe itself
    one.labels("x").observe(0.002)
    named = [(n.replace("one_by_one", "h"), labels, v) for n, labels, v in _samples(one)]
    assert named == [(n.replace("in_bulk", "h"), labels, v) for n, labels, v in _samples(bulk)]


def _value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_a_turns_requests_are_written_at_its_end_and_none_is_lost() -> None:
    tally = RequestTally()
    ok = {"model": "tally_m", "version": "1", "arm": "routed", "code": "OK"}
    hist = {"model": "tally_m", "version": "1"}
    before_ok = _value("conch_gateway_requests_total", **ok)
    before_count = _value("conch_request_duration_seconds_count", **hist)
    for seconds in (0.001, 0.004, 0.2):
        tally.record("tally_m", 1, "routed", "OK", seconds)
    tally.record("tally_m", 1, "pinned", "INTERNAL", 0.003)
    assert _value("conch_gateway_requests_total", **ok) == before_ok  # not yet: same turn
    await asyncio.sleep(0)
    assert _value("conch_gateway_requests_total", **ok) == before_ok + 3
    failed = {**ok, "arm": "pinned", "code": "INTERNAL"}
    assert _value("conch_gateway_requests_total", **failed) == 1
    assert _value("conch_request_duration_seconds_count", **hist) == before_count + 4
    tally.record("tally_m", 1, "routed", "OK", 0.001)  # the next turn's first schedules again
    await asyncio.sleep(0)
    assert _value("conch_gateway_requests_total", **ok) == before_ok + 4


def test_without_a_running_loop_a_request_is_written_at_once() -> None:
    tally = RequestTally()
    labels = {"model": "tally_sync", "version": "2", "arm": "routed", "code": "OK"}
    tally.record("tally_sync", 2, "routed", "OK", 0.01)
    assert _value("conch_gateway_requests_total", **labels) == 1


def test_answers_left_by_a_loop_that_closed_go_out_with_the_next_loops() -> None:
    tally = RequestTally()
    labels = {"model": "tally_loops", "version": "1", "arm": "routed", "code": "OK"}

    async def answer() -> None:
        tally.record("tally_loops", 1, "routed", "OK", 0.01)

    loop = asyncio.new_event_loop()
    loop.call_soon(tally.record, "tally_loops", 1, "routed", "OK", 0.01)
    loop.call_soon(loop.stop)  # the loop stops in the turn of the answer, before its flush
    loop.run_forever()
    loop.close()
    assert _value("conch_gateway_requests_total", **labels) == 0
    asyncio.run(answer())
    assert _value("conch_gateway_requests_total", **labels) == 2


_CHILD = """
import asyncio, sys
from gateway.core.request_tally import record_request
async def main():
    for n in range(int(sys.argv[1])):
        record_request("mp_t", 1, "routed", "OK", 0.001 * n)
    await asyncio.sleep(0)
asyncio.run(main())
"""


def test_gateway_processes_tallies_are_summed_in_multiprocess_mode(tmp_path: Path) -> None:
    families = families_after_children(_CHILD, (3, 5), tmp_path)
    assert gateway_request_counts(families) == ([8.0], [8.0])
    duration = families["conch_request_duration_seconds"].samples
    up_to_2ms = [s.value for s in duration if s.labels.get("le") == "0.002"]
    assert up_to_2ms == [6.0]  # 0, 1, 2 ms of each process (buckets are cumulative)
