"""``python -m bench.many_models --mode warm`` end to end, small: a real ``conch up`` in
explicit mode with the hottest models pre-loaded, the Zipf client in its own processes, and the
figures and raw numbers it writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.many_models.__main__ import main

pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.e2e


def test_warm_mode_serves_every_request_from_loaded_models(tmp_path: Path) -> None:
    out = tmp_path / "results"
    argv = ["--mode", "warm", "--models", "12", "--hot", "4", "--workers", "2",
            "--concurrency", "4", "--duration", "3", "--repo", str(tmp_path / "repo"),
            "--out-dir", str(out)]  # fmt: skip
    assert main(argv) == 0
    (result,) = out.glob("many_models-*.json")
    data = json.loads(result.read_text())
    assert data["failed"] == {}
    (run,) = data["runs"]
    summary = run["summary"]
    assert summary["errors"] == 0 and summary["requests"] > 20
    assert summary["hit_ratio"] == 1.0  # every model was loaded before the run
    assert summary["cold_requests"] == 0 and summary["loads"] == 0
    assert summary["warm_p50_ms"] > 0 and summary["throughput_rps"] > 0
    assert summary["models_requested"] <= 4  # the mix is cut to the pre-loaded models
    assert set(run["requests"]["model"]) <= {0, 1, 2, 3}
    # Two workers with four small models each: more than an interpreter, less than a GiB.
    assert 50 < summary["peak_worker_rss_mib"] < 1024
    assert summary["index_samples"] > 0 and summary["index_errors"] == 0
    assert "| hit ratio (requests that found their model loaded) | 100.0% |" in (
        result.with_suffix(".md").read_text()
    )
