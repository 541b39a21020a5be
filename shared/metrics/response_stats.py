"""Triton's ``response_stats``: per response index, how each response of a request went.

A worker adds to the version's statistics hash (``shared.wire.keys.stats``) one field pair per
response index and kind, ``response:<index>:<kind>_count`` and ``..._ns``; the gateway folds them
back into Triton's map ``{"0": {"success": {...}, ...}, "1": ...}`` (``gateway.extensions.stats``).
Pure: no I/O.

As Triton counts them (``InferenceStatsAggregator::UpdateResponse*``): a response with outputs
counts ``compute_infer`` (from the execution's start, or the request's previous response, until
the model handed it over), ``compute_output`` (turning its tensors into the wire form) and
``success`` (their sum); an error response counts the same with ``fail``; a final flag sent with no
response counts ``empty_response`` (the infer time only); a cancelled request's final response
counts ``cancel``. An ordinary (non-decoupled) model answers each request with response 0.
"""

from __future__ import annotations

from typing import Any

KINDS = ("compute_infer", "compute_output", "success", "fail", "empty_response", "cancel")
PREFIX = "response:"


def add(stats: dict[str, int], index: int, kind: str, ns: int) -> None:
    """Count one ``kind`` for response ``index`` lasting ``ns``."""
    count, total = f"{PREFIX}{index}:{kind}_count", f"{PREFIX}{index}:{kind}_ns"
    stats[count] = stats.get(count, 0) + 1
    stats[total] = stats.get(total, 0) + max(0, ns)


def computed(stats: dict[str, int], index: int, infer_ns: int, output_ns: int, ok: bool) -> None:
    """A response the model computed: its infer and output phases and its outcome."""
    add(stats, index, "compute_infer", infer_ns)
    add(stats, index, "compute_output", output_ns)
    add(stats, index, "success" if ok else "fail", infer_ns + output_ns)


def frame(
    stats: dict[str, int],
    index: int,
    infer_ns: int,
    output_ns: int,
    outputs: bool,
    failed: bool,
    cancelled: bool,
) -> None:
    """One response of a decoupled model: ``cancelled`` (the final response of a cancelled
    request), ``failed`` (an error), with ``outputs``, or else a final flag with no response."""
    if cancelled:
        add(stats, index, "cancel", infer_ns)
    elif failed or outputs:
        computed(stats, index, infer_ns, output_ns, ok=not failed)
    else:
        add(stats, index, "empty_response", infer_ns)


def collect(values: dict[str, int]) -> dict[str, dict[str, dict[str, int]]]:
    """Triton's ``response_stats`` map from the hash's fields (every kind present per index)."""
    indexes: set[int] = set()
    for name in values:
        if name.startswith(PREFIX):
            key = name[len(PREFIX) :].split(":", 1)[0]
            if key.isdigit():
                indexes.add(int(key))
    result: dict[str, dict[str, Any]] = {}
    for index in sorted(indexes):
        result[str(index)] = {
            kind: {
                "count": values.get(f"{PREFIX}{index}:{kind}_count", 0),
                "ns": values.get(f"{PREFIX}{index}:{kind}_ns", 0),
            }
            for kind in KINDS
        }
    return result
