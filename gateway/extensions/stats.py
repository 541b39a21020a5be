"""Triton's statistics extension, aggregated over the whole fleet from Redis counters.

Workers add to one hash per (model, version) after every batch; any gateway replica can answer
for all of them.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from shared.metrics import response_stats
from shared.wire import keys


def _pair(count: int, ns: int) -> dict[str, int]:
    return {"count": count, "ns": ns}


def model_stats(name: str, version: int, raw: dict[bytes, bytes]) -> dict[str, Any]:
    values = {k.decode(): int(v) for k, v in raw.items()}
    hits, hit_ns = values.get("cache_hit_count", 0), values.get("cache_hit_ns", 0)
    executed = values.get("success_count", 0)
    success = executed + hits  # a cache hit is a success that never ran (Triton's count)
    queue_ns = values.get("queue_ns", 0)
    compute = {
        phase: values.get(f"compute_{phase}_ns", 0) for phase in ("input", "infer", "output")
    }
    batch_sizes = sorted(
        {int(k.split(":")[1]) for k in values if k.startswith("batch:") and k.endswith(":count")}
    )
    return {
        "name": name,
        "version": str(version),
        "last_inference": values.get("last_inference", 0),
        "inference_count": values.get("inference_count", 0),
        "execution_count": values.get("execution_count", 0),
        "inference_stats": {
            "success": _pair(success, queue_ns + sum(compute.values()) + hit_ns),
            "fail": _pair(values.get("fail_count", 0), 0),
            "queue": _pair(executed, queue_ns),
            "compute_input": _pair(executed, compute["input"]),
            "compute_infer": _pair(executed, compute["infer"]),
            "compute_output": _pair(executed, compute["output"]),
            "cache_hit": _pair(hits, hit_ns),
            "cache_miss": _pair(values.get("cache_miss_count", 0), values.get("cache_miss_ns", 0)),
            # Requests their clients cancelled (never run, or stopped while streaming); Triton's
            # JSON statistics name it the same (not in tritonclient's gRPC message yet).
            "cancel": _pair(values.get("cancel_count", 0), 0),
        },
        "response_stats": response_stats.collect(values),
        "batch_stats": [
            {
                "batch_size": size,
                **{
                    f"compute_{phase}": _pair(
                        values.get(f"batch:{size}:count", 0),
                        values.get(f"batch:{size}:compute_{phase}_ns", 0),
                    )
                    for phase in ("input", "infer", "output")
                },
            }
            for size in batch_sizes
        ],
        "memory_usage": [],
    }


async def collect(r: aioredis.Redis, versions: dict[str, list[int]]) -> list[dict[str, Any]]:
    pairs = [(model, v) for model, vs in sorted(versions.items()) for v in sorted(vs)]
    async with r.pipeline(transaction=False) as pipe:
        for model, version in pairs:
            pipe.hgetall(keys.stats(model, version))
        raws = await pipe.execute()
    return [model_stats(m, v, raw) for (m, v), raw in zip(pairs, raws, strict=True)]
