"""The Redis scripts that keep an ensemble request's progress, each on the ensemble's slot.

- START: create the request's state (its payload, stream entry and the children of the steps
  submitted with it) unless it exists. A fresh request answers 1; a resumed one (reclaimed from a
  dead scheduler, or recovered) answers its whole state and writes nothing: its runner plans
  again from it (steps already submitted are not queued twice: admission keeps child ids).
- STEP: for every reply of one step-stream entry, write the step's output tensors once
  (``d:<step>`` guards it: a redelivered reply records nothing twice) and the children of the
  steps its runner submitted in the same pipeline; then, for each, compare the state's size with
  the size the runner expects from what it knows. Equal: the runner's view was the whole state and
  its plan stands (1). Different (another scheduler recorded a parallel branch, or the runner
  knew nothing of the request: expected 0): the whole state comes back and the runner plans again
  from it. The entry is acked only when every reply's plan stood (or its request is gone: 0), so
  a scheduler that dies before its second plan leaves the entry pending for a live one.
- FINISH: for many requests at once, delete each state and ack + delete its ensemble request
  entry, only if the state still exists (two schedulers finishing the same request count it
  once); the statistics of those finished are added with one HINCRBY per counter.
"""

from __future__ import annotations

from collections.abc import Iterable

from redis.asyncio.client import Pipeline
from redis.typing import EncodableT

from shared import lua
from shared.wire import keys

# The scripts, with their KEYS, ARGV and replies: shared/lua/ensemble_start.lua,
# ensemble_step.lua and ensemble_finish.lua.

# The ensemble's statistics counters, in FINISH's argument order (NAMES in ensemble_finish.lua:
# tests/contract checks they agree).
COUNTERS = ("success_count", "fail_count", "inference_count", "execution_count", "compute_infer_ns")


def queue_start(
    pipe: Pipeline,
    state: str,
    payload: bytes,
    entry: str,
    keep_ms: int,
    children: dict[str, str],
) -> None:
    args: list[EncodableT] = [payload, entry, max(1, keep_ms)]
    for field, child in children.items():
        args.extend((field, child))
    pipe.eval(lua.ENSEMBLE_START.source, 1, state, *args)


class StepRecord:
    """One reply of a step-stream entry, for STEP: the fields to write and the size expected."""

    __slots__ = ("children", "expected", "state", "step", "tensors")

    def __init__(
        self,
        state: str,
        step: int,
        expected: int,
        tensors: list[tuple[str, bytes]],
        children: dict[str, str],
    ):
        self.state, self.step, self.expected = state, step, expected
        self.tensors, self.children = tensors, children


def queue_step(
    pipe: Pipeline, steps_stream: str, entry_id: bytes, records: list[StepRecord]
) -> None:
    args: list[EncodableT] = [keys.SCHEDULER_GROUP, entry_id]
    for record in records:
        args.extend((record.step, record.expected, len(record.tensors), len(record.children)))
        for name, data in record.tensors:
            args.extend((f"t:{name}", data))
        for field, child in record.children.items():
            args.extend((field, child))
    states = (r.state for r in records)
    pipe.eval(lua.ENSEMBLE_STEP.source, 1 + len(records), steps_stream, *states, *args)


def queue_finish(
    pipe: Pipeline,
    stats_key: str,
    finished: Iterable[tuple[str, str, str, dict[str, int]]],
    last_inference_ms: int,
) -> None:
    """``finished``: (state, request stream, entry id, counters) of each request answered."""
    script_keys: list[str] = [stats_key]
    args: list[EncodableT] = [keys.SCHEDULER_GROUP, last_inference_ms]
    for state, stream, entry_id, counters in finished:
        script_keys.extend((state, stream))
        args.append(entry_id)
        args.extend(counters.get(name, 0) for name in COUNTERS)
    pipe.eval(lua.ENSEMBLE_FINISH.source, len(script_keys), *script_keys, *args)


def parse_state(flat: list[bytes] | None) -> dict[bytes, bytes] | None:
    """HGETALL's flat answer as a dict; None when the state is gone (finished or expired)."""
    if not flat or not isinstance(flat, list):
        return None
    return dict(zip(flat[0::2], flat[1::2], strict=True))
