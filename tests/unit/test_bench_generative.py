"""``conch bench generative`` in process, small: every mode generates every token, and the
summary's figures are computed from the timelines (not timed: no assertion on speed)."""

from __future__ import annotations

from pathlib import Path

from bench import generative
from tests.unit.generative_helpers import VOCAB, seeded_model
from workers.generative import checkpoint


def test_every_mode_generates_every_token(tmp_path: Path) -> None:
    checkpoint.save(seeded_model(), VOCAB, tmp_path)
    for mode, batch in (("continuous", 1), ("static-1", 1), ("static-4", 4)):
        row = generative.run_in_process(tmp_path, mode, requests=4, tokens=8, batch=batch)
        assert row["mode"] == mode
        assert row["requests"] == 4 and row["tokens"] == 32
        assert row["tokens_per_s"] > 0 and row["ttft_p99_ms"] >= row["ttft_p50_ms"]


def test_summary_figures_come_from_the_timelines() -> None:
    first = generative.Timeline(submitted=0.0, tokens=[1.0, 1.5, 2.0])
    second = generative.Timeline(submitted=0.5, tokens=[3.0, 4.0])
    row = generative.summarize("m", [first, second], started=0.0)
    assert row["tokens"] == 5 and row["seconds"] == 4.0 and row["tokens_per_s"] == 1.2
    assert row["ttft_p50_ms"] in (1000.0, 2500.0) and row["ttft_p99_ms"] == 2500.0
    assert row["itl_p99_ms"] == 1000.0
    assert generative.percentile([], 0.5) != generative.percentile([], 0.5)  # NaN
