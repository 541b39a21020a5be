"""Triton's ``response_stats`` from the statistics hash's fields (``shared.metrics.response_stats``)
and its way to gRPC clients (the same dict through ``json_format.ParseDict``)."""

from __future__ import annotations

from google.protobuf import json_format
from tritonclient.grpc import service_pb2

from gateway.extensions.stats import model_stats
from shared.metrics import response_stats


def _hash(stats: dict[str, int]) -> dict[bytes, bytes]:
    return {k.encode(): str(v).encode() for k, v in stats.items()}


def test_each_kind_of_response_is_counted_under_its_index() -> None:
    stats: dict[str, int] = {}
    response_stats.frame(stats, 0, 100, 10, True, False, False)  # outputs
    response_stats.frame(stats, 1, 200, 20, True, True, False)  # an error
    response_stats.frame(stats, 2, 300, 0, False, False, False)  # a final flag alone
    response_stats.frame(stats, 2, 50, 0, False, False, True)  # a cancelled request's last
    found = response_stats.collect(stats)
    assert set(found) == {"0", "1", "2"}
    assert found["0"]["success"] == {"count": 1, "ns": 110}
    assert found["0"]["compute_infer"] == {"count": 1, "ns": 100}
    assert found["0"]["compute_output"] == {"count": 1, "ns": 10}
    assert found["1"]["fail"] == {"count": 1, "ns": 220} and found["1"]["success"]["count"] == 0
    assert found["2"]["empty_response"] == {"count": 1, "ns": 300}
    assert found["2"]["cancel"] == {"count": 1, "ns": 50}
    assert found["2"]["compute_infer"]["count"] == 0
    assert set(found["0"]) == set(response_stats.KINDS)


def test_indexes_sort_as_numbers_and_other_fields_are_ignored() -> None:
    stats = {"success_count": 3, "batch:2:count": 1}
    for index in (10, 2, 0):
        response_stats.computed(stats, index, 1, 1, ok=True)
    assert list(response_stats.collect(stats)) == ["0", "2", "10"]


def test_grpc_clients_get_the_same_response_stats() -> None:
    stats = {"success_count": 1}
    response_stats.computed(stats, 0, 400, 40, ok=True)
    response_stats.add(stats, 1, "empty_response", 7)
    found = model_stats("m", 1, _hash(stats))
    assert found["response_stats"]["0"]["success"] == {"count": 1, "ns": 440}
    message = json_format.ParseDict(
        {"model_stats": [found]}, service_pb2.ModelStatisticsResponse(), ignore_unknown_fields=True
    )
    responses = message.model_stats[0].response_stats
    assert responses["0"].success.ns == 440 and responses["0"].compute_output.ns == 40
    assert responses["1"].empty_response.count == 1 and responses["1"].empty_response.ns == 7


def test_a_model_with_no_responses_yet_has_an_empty_map() -> None:
    assert model_stats("m", 1, {})["response_stats"] == {}
