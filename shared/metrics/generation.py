"""The generation metrics' names and buckets (generative models, ``workers/generative``).

They are recorded where they are seen, in the model process, through Triton's custom metrics
API (``pb_utils.MetricFamily``, as Triton's vLLM backend records its ``vllm:*`` families), and
exported by the worker with its own ``/metrics``; labels ``model`` and ``version``.
"""

from __future__ import annotations

TIME_TO_FIRST_TOKEN = "conch_generation_time_to_first_token_seconds"
INTER_TOKEN = "conch_generation_inter_token_seconds"
TOKENS = "conch_generation_tokens_total"
PROMPT_TOKENS = "conch_generation_prompt_tokens_total"
ACTIVE = "conch_generation_active_sequences"
WAITING = "conch_generation_waiting_sequences"
KV_CACHE_USAGE = "conch_generation_kv_cache_usage_ratio"
CANCELLED = "conch_generation_cancelled_total"

# (name, kind) of every family, for the dashboards' checks.
GENERATION_FAMILIES: tuple[tuple[str, str], ...] = (
    (TIME_TO_FIRST_TOKEN, "histogram"),
    (INTER_TOKEN, "histogram"),
    (TOKENS, "counter"),
    (PROMPT_TOKENS, "counter"),
    (ACTIVE, "gauge"),
    (WAITING, "gauge"),
    (KV_CACHE_USAGE, "gauge"),
    (CANCELLED, "counter"),
)
TTFT_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]
INTER_TOKEN_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0]
