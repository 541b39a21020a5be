"""The statistics extension over gRPC: the JSON counters converted into tritonclient's
``ModelStatistics`` message (``gateway.grpc.service`` uses ``json_format.ParseDict`` with the
same dict). Every field the proto has is filled; ``cancel`` reaches gRPC clients the day the
proto has it (docs/protocol.md says it does not yet: this test fails then, to update it)."""

from __future__ import annotations

from google.protobuf import json_format
from tritonclient.grpc import service_pb2

from gateway.extensions.stats import model_stats

RAW = {
    b"success_count": b"5",
    b"fail_count": b"2",
    b"cancel_count": b"3",
    b"queue_ns": b"1000",
    b"compute_infer_ns": b"4000",
    b"inference_count": b"5",
    b"execution_count": b"4",
}


def test_grpc_statistics_carry_every_field_the_proto_has() -> None:
    found = model_stats("m", 1, RAW)
    message = json_format.ParseDict(
        {"model_stats": [found]},
        service_pb2.ModelStatisticsResponse(),
        ignore_unknown_fields=True,
    )
    stats = message.model_stats[0].inference_stats
    assert stats.success.count == 5 and stats.fail.count == 2
    assert stats.queue.ns == 1000 and stats.compute_infer.ns == 4000
    fields = {f.name for f in service_pb2.InferStatistics.DESCRIPTOR.fields}
    assert found["inference_stats"]["cancel"]["count"] == 3  # the JSON form has it
    if "cancel" in fields:  # filled by the same conversion, as every other counter
        assert stats.cancel.count == 3
    # What docs/protocol.md#statistics states about the shipped proto.
    assert "cancel" not in fields, "the proto has 'cancel' now: update docs/protocol.md"
