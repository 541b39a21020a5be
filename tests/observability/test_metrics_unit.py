"""shared/metrics/ and shared/runtime/tracing.py without a mesh: exposition, multiprocess
aggregation, the counters behind the statistics extension, and trace propagation."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest
from prometheus_client.parser import text_string_to_metric_families

from shared import metrics
from shared.runtime import tracing
from shared.wire import envelope
from tests.multiprocess_metrics import families_after_children, gateway_request_counts

ROOT = Path(__file__).resolve().parents[2]


def _stats(successes: int, failures: int, size: int) -> dict[str, int]:
    return {
        "execution_count": 1,
        "inference_count": size,
        "success_count": successes,
        "fail_count": failures,
        "queue_ns": 3_000_000,
        "compute_input_ns": 1_000 * (successes + failures),
        "compute_infer_ns": 2_000_000 * (successes + failures),
        "compute_output_ns": 5_000 * (successes + failures),
        f"batch:{size}:count": 1,
        f"batch:{size}:compute_input_ns": 1_000,
        f"batch:{size}:compute_infer_ns": 2_000_000,
        f"batch:{size}:compute_output_ns": 5_000,
    }


def test_triton_counters_keep_tritons_names_and_agree_with_the_stats_increments() -> None:
    metrics.init_model("unit_m", 3)
    metrics.record_batch("unit_m", 3, _stats(successes=3, failures=1, size=4))
    metrics.record_failures("unit_m", 3, metrics.REJECTED, 2)
    text = metrics.exposition().decode()
    assert "# TYPE nv_inference_request_success counter\n" in text
    assert "nv_inference_request_success_total" not in text
    assert 'nv_inference_request_success{model="unit_m",version="3"} 3.0' in text
    assert 'nv_inference_request_failure{model="unit_m",version="3",reason="BACKEND"} 1.0' in text
    assert 'nv_inference_request_failure{model="unit_m",version="3",reason="REJECTED"} 2.0' in text
    assert 'nv_inference_request_failure{model="unit_m",version="3",reason="CANCELED"} 0.0' in text
    assert 'nv_inference_count{model="unit_m",version="3"} 4.0' in text
    assert 'nv_inference_exec_count{model="unit_m",version="3"} 1.0' in text
    # Request duration = queue + compute (per request), as the statistics extension's success.ns.
    expected_us = (3_000_000 + 4 * (1_000 + 2_000_000 + 5_000)) / 1000
    assert metrics.REQUEST_DURATION_US.value("unit_m", 3) == expected_us
    assert metrics.QUEUE_DURATION_US.value("unit_m", 3) == 3000.0
    families = {f.name: f for f in text_string_to_metric_families(text)}
    batch = families["conch_batch_size"]
    count = [
        s for s in batch.samples if s.name.endswith("_count") and s.labels["model"] == "unit_m"
    ]
    assert count[0].value == 1
    compute = families["conch_compute_duration_seconds"]
    infer_sum = [
        s
        for s in compute.samples
        if s.name.endswith("_sum")
        and s.labels.get("phase") == "infer"
        and s.labels["model"] == "unit_m"
    ]
    assert infer_sum[0].value == pytest.approx(0.002)


def test_scrape_hooks_run_before_exposition() -> None:
    seen = []
    metrics.on_scrape(lambda: seen.append(1))
    metrics.exposition()
    assert seen


def test_label_children_are_cached() -> None:
    first = metrics.child(metrics.REJECTED_REQUESTS, "t", "m", "rate_limited")
    assert metrics.child(metrics.REJECTED_REQUESTS, "t", "m", "rate_limited") is first
    metrics.record_rejected("t", "m", "rate_limited")
    metrics.record_rejected(None, "m", "queue_full")
    text = metrics.exposition().decode()
    assert 'conch_requests_rejected_total{model="m",reason="rate_limited",tenant="t"} 1.0' in text
    assert 'tenant="anonymous"' in text


_CHILD = """
import sys
from shared import metrics
for _ in range(int(sys.argv[1])):
    metrics.record_request("mp", 1, "routed", "OK", 0.004)
metrics.record_rejected("acme", "mp", "rate_limited")
"""


def test_gateway_processes_are_summed_in_multiprocess_mode(tmp_path: Path) -> None:
    families = families_after_children(_CHILD, (3, 5), tmp_path)
    assert gateway_request_counts(families) == ([8.0], [8.0])
    rejected = families["conch_requests_rejected"].samples
    assert [(s.labels["tenant"], s.value) for s in rejected if s.name.endswith("_total")] == [
        ("acme", 2.0)
    ]


def test_gateway_main_sets_a_fresh_multiprocess_dir(tmp_path: Path, monkeypatch) -> None:
    from gateway.__main__ import metrics_dir

    stale = tmp_path / "counter_123.db"
    stale.write_bytes(b"x")
    monkeypatch.setenv(metrics.MULTIPROC_ENV, str(tmp_path))
    path, ours = metrics_dir()
    assert path == tmp_path and not ours and not stale.exists()
    monkeypatch.delenv(metrics.MULTIPROC_ENV)
    path, ours = metrics_dir()
    assert ours and path.is_dir() and os.environ[metrics.MULTIPROC_ENV] == str(path)
    path.rmdir()


# --- tracing ----------------------------------------------------------------------------------


def test_tracing_is_off_by_default() -> None:
    assert tracing.enabled_by({}) is None
    assert tracing.enabled_by({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}) == "otlp"
    assert (
        tracing.enabled_by(
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_SDK_DISABLED": "true"}
        )
        is None
    )
    assert tracing.enabled_by({"CONCH_TRACING": "console"}) == "console"
    assert not tracing.ENABLED
    assert tracing.start("x") is tracing.NULL_SPAN
    assert tracing.NULL_SPAN.carrier == {}


def test_trace_context_travels_in_the_envelope() -> None:
    sdk = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")
    exporter = sdk.InMemorySpanExporter()
    assert tracing.setup("test", env={}, exporter=exporter)
    try:
        # gateway
        root = tracing.start("conch.gateway.infer", None, {"model": "m"})
        request = envelope.InferRequest(
            id="r1",
            model="m",
            version=1,
            inputs=[envelope.Tensor("INPUT0", "INT32", [1, 4], b"\x00" * 16)],
            outputs=[],
            parameters={},
            reply_to="s",
            deadline_ms=0,
            enqueued_ms=0,
            trace=root.carrier,
        )
        data = envelope.encode(request)
        # scheduler: reads the carrier without decoding tensors
        carrier = tracing.decode_trace(data)
        assert carrier == root.carrier and "traceparent" in carrier
        tracing.record("conch.scheduler.queue", carrier, 1_000, 2_000, {"priority": 1})
        # worker
        decoded = envelope.decode_request(data)
        tracing.record("conch.worker.execute", decoded.trace, 2_000, 3_000)
        root.end()
    finally:
        tracing.shutdown()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"conch.gateway.infer", "conch.scheduler.queue", "conch.worker.execute"}
    trace_id = spans["conch.gateway.infer"].context.trace_id
    root_id = spans["conch.gateway.infer"].context.span_id
    for name in ("conch.scheduler.queue", "conch.worker.execute"):
        assert spans[name].context.trace_id == trace_id
        assert spans[name].parent.span_id == root_id
    assert not tracing.ENABLED


def test_decode_trace_tolerates_old_envelopes() -> None:
    class Old(msgspec.Struct, array_like=True):
        id: str
        model: str
        version: int
        inputs: list
        outputs: list
        parameters: dict
        reply_to: str
        deadline_ms: int
        enqueued_ms: int

    data = msgspec.msgpack.encode(Old("r", "m", 1, [], [], {}, "s", 0, 0))
    assert tracing.decode_trace(data) == {}
    assert tracing.decode_trace(b"\xc1") == {}
