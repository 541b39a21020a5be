"""Generation metrics, recorded by the engine where it sees them (the model process).

The names are Conch's (``shared.metrics.generation``; Triton's vLLM backend records its
``vllm:*`` families the same way, from the model, with ``pb_utils.MetricFamily``):
:class:`FamilyMetrics` takes a module with Triton's custom metrics API (``pb_utils`` in a Python
model; ``workers.python.pb_metrics`` in tests), so the worker exports them with its own
``/metrics``. ``NullMetrics`` records nothing.
"""

from __future__ import annotations

from typing import Any

from shared.metrics.generation import (
    ACTIVE,
    CANCELLED,
    INTER_TOKEN,
    INTER_TOKEN_BUCKETS,
    KV_CACHE_USAGE,
    PROMPT_TOKENS,
    TIME_TO_FIRST_TOKEN,
    TOKENS,
    TTFT_BUCKETS,
    WAITING,
)


class NullMetrics:
    def first_token(self, seconds: float) -> None: ...
    def inter_token(self, seconds: float) -> None: ...
    def tokens(self, generated: int, prompt: int) -> None: ...
    def occupancy(self, active: int, waiting: int, kv_usage: float) -> None: ...
    def cancelled(self) -> None: ...


class FamilyMetrics(NullMetrics):
    """Over Triton's custom metrics API; ``labels`` (model, version) on every series."""

    def __init__(self, api: Any, labels: dict[str, str]):
        family = api.MetricFamily
        hist, counter, gauge = family.HISTOGRAM, family.COUNTER, family.GAUGE

        def metric(name: str, text: str, kind: int, buckets: list[float] | None = None) -> Any:
            return family(name, text, kind).Metric(labels=labels, buckets=buckets)

        self._ttft = metric(TIME_TO_FIRST_TOKEN, "Time to first token", hist, TTFT_BUCKETS)
        self._itl = metric(INTER_TOKEN, "Time between tokens", hist, INTER_TOKEN_BUCKETS)
        self._tokens = metric(TOKENS, "Tokens generated", counter)
        self._prompt = metric(PROMPT_TOKENS, "Prompt tokens processed", counter)
        self._active = metric(ACTIVE, "Sequences in the running batch", gauge)
        self._waiting = metric(WAITING, "Requests waiting to join the batch", gauge)
        self._kv = metric(KV_CACHE_USAGE, "Fraction of KV-cache positions in use", gauge)
        self._cancelled = metric(CANCELLED, "Generations cancelled", counter)
        for series in (self._tokens, self._prompt, self._cancelled):
            series.increment(0)  # exported from the start, so rates have a baseline

    def first_token(self, seconds: float) -> None:
        self._ttft.observe(seconds)

    def inter_token(self, seconds: float) -> None:
        self._itl.observe(seconds)

    def tokens(self, generated: int, prompt: int) -> None:
        if generated:
            self._tokens.increment(generated)
        if prompt:
            self._prompt.increment(prompt)

    def occupancy(self, active: int, waiting: int, kv_usage: float) -> None:
        self._active.set(active)
        self._waiting.set(waiting)
        self._kv.set(kv_usage)

    def cancelled(self) -> None:
        self._cancelled.increment(1)
