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

from shared.wire import keys

# KEYS: state. ARGV: request payload, entry reference, milliseconds to keep the state, then
# field/value pairs (the children ``c:<step>`` submitted with the request).
START_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'req', ARGV[1], 'entry', ARGV[2], unpack(ARGV, 4))
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
return redis.call('HGETALL', KEYS[1])
"""

# KEYS: step stream, then one state per reply. ARGV: group, entry id, then per reply: step,
# expected size (0: answer the state), number of tensor pairs, number of child pairs, the tensor
# field/value pairs, the child field/value pairs.
STEP_LUA = """
local out, clean, a = {}, true, 3
for i = 2, #KEYS do
  local step, expected = ARGV[a], tonumber(ARGV[a + 1])
  local tensors, children = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local first = a + 4
  local mid = first + 2 * tensors
  a = mid + 2 * children
  if redis.call('EXISTS', KEYS[i]) == 0 then
    out[i - 1] = 0
  else
    if redis.call('HSETNX', KEYS[i], 'd:' .. step, '1') == 1 and tensors > 0 then
      redis.call('HSET', KEYS[i], unpack(ARGV, first, mid - 1))
    end
    if children > 0 then redis.call('HSET', KEYS[i], unpack(ARGV, mid, a - 1)) end
    if redis.call('HLEN', KEYS[i]) == expected then
      out[i - 1] = 1
    else
      out[i - 1] = redis.call('HGETALL', KEYS[i])
      clean = false
    end
  end
end
if clean then
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
  redis.call('XDEL', KEYS[1], ARGV[2])
end
return out
"""

# The ensemble's statistics counters, in FINISH's argument order.
COUNTERS = ("success_count", "fail_count", "inference_count", "execution_count", "compute_infer_ns")

# KEYS: stats, then per request: state, request stream. ARGV: group, last inference ms, then per
# request: entry id and one value per counter of COUNTERS. Answers 1/0 per request (finished here).
FINISH_LUA = """
local n = N_COUNTERS
local sums, out, any = {}, {}, false
for j = 1, n do sums[j] = 0 end
for i = 1, (#KEYS - 1) / 2 do
  local base = 3 + (i - 1) * (n + 1)
  if redis.call('DEL', KEYS[2 * i]) == 1 then
    redis.call('XACK', KEYS[2 * i + 1], ARGV[1], ARGV[base])
    redis.call('XDEL', KEYS[2 * i + 1], ARGV[base])
    for j = 1, n do sums[j] = sums[j] + tonumber(ARGV[base + j]) end
    out[i], any = 1, true
  else
    out[i] = 0
  end
end
if any then
  local names = {COUNTER_NAMES}
  for j = 1, n do
    if sums[j] ~= 0 then
      redis.call('HINCRBY', KEYS[1], names[j], string.format('%.0f', sums[j]))
    end
  end
  redis.call('HSET', KEYS[1], 'last_inference', ARGV[2])
end
return out
""".replace("N_COUNTERS", str(len(COUNTERS))).replace(
    "COUNTER_NAMES", ", ".join(f"'{name}'" for name in COUNTERS)
)


def queue_start(
    pipe: Pipeline,
    state: str,
    payload: bytes,
    entry: str,
    keep_ms: int,
    children: dict[str, str],
) -> None:
    args: list[object] = [payload, entry, max(1, keep_ms)]
    for field, child in children.items():
        args.extend((field, child))
    pipe.eval(START_LUA, 1, state, *args)


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
    args: list[object] = [keys.SCHEDULER_GROUP, entry_id]
    for record in records:
        args.extend((record.step, record.expected, len(record.tensors), len(record.children)))
        for name, data in record.tensors:
            args.extend((f"t:{name}", data))
        for field, child in record.children.items():
            args.extend((field, child))
    pipe.eval(STEP_LUA, 1 + len(records), steps_stream, *(r.state for r in records), *args)


def queue_finish(
    pipe: Pipeline,
    stats_key: str,
    finished: Iterable[tuple[str, str, str, dict[str, int]]],
    last_inference_ms: int,
) -> None:
    """``finished``: (state, request stream, entry id, counters) of each request answered."""
    script_keys: list[str] = [stats_key]
    args: list[object] = [keys.SCHEDULER_GROUP, last_inference_ms]
    for state, stream, entry_id, counters in finished:
        script_keys.extend((state, stream))
        args.append(entry_id)
        args.extend(counters.get(name, 0) for name in COUNTERS)
    pipe.eval(FINISH_LUA, len(script_keys), *script_keys, *args)


def parse_state(flat: list[bytes] | None) -> dict[bytes, bytes] | None:
    """HGETALL's flat answer as a dict; None when the state is gone (finished or expired)."""
    if not flat or not isinstance(flat, list):
        return None
    return dict(zip(flat[0::2], flat[1::2], strict=True))
