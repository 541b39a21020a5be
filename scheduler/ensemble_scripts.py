"""The Redis scripts that keep an ensemble request's progress, each on the ensemble's slot.

- START: create the request's state (its payload and stream entry) unless it exists, and
  return the whole state: a fresh request and a resumed one (reclaimed from a dead scheduler)
  take the same path.
- RECORD: write one answered step's output tensors, once (``d:<step>`` guards it: a redelivered
  step reply records nothing twice), and return the whole state. The step reply's stream entry
  is acked later, after the steps it made runnable were submitted, so a scheduler that dies in
  between leaves the entry pending for a live one to process again.
- FINISH: delete the state and ack + delete the ensemble request's stream entry, adding the
  statistics, only if the state still exists: two schedulers finishing the same request count
  it once (the gateway keeps the first reply).
"""

from __future__ import annotations

from redis.asyncio.client import Pipeline

from shared import keys

# KEYS: state. ARGV: request payload, entry reference, milliseconds to keep the state.
START_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'req', ARGV[1], 'entry', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return redis.call('HGETALL', KEYS[1])
"""

# KEYS: state. ARGV: step index, then tensor name, encoded tensor pairs.
RECORD_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
if redis.call('HSETNX', KEYS[1], 'd:' .. ARGV[1], '1') == 1 then
  for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[1], 't:' .. ARGV[i], ARGV[i + 1]) end
end
return redis.call('HGETALL', KEYS[1])
"""

# KEYS: state, request stream, stats. ARGV: group, entry id, last inference ms, counter pairs.
FINISH_LUA = """
if redis.call('DEL', KEYS[1]) == 0 then return 0 end
redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[2], ARGV[2])
for i = 4, #ARGV, 2 do redis.call('HINCRBY', KEYS[3], ARGV[i], ARGV[i + 1]) end
redis.call('HSET', KEYS[3], 'last_inference', ARGV[3])
return 1
"""


def queue_start(pipe: Pipeline, state: str, payload: bytes, entry: str, keep_ms: int) -> None:
    pipe.eval(START_LUA, 1, state, payload, entry, max(1, keep_ms))


def queue_record(pipe: Pipeline, state: str, step: int, tensors: list[tuple[str, bytes]]) -> None:
    args: list[object] = [step]
    for name, data in tensors:
        args.extend((name, data))
    pipe.eval(RECORD_LUA, 1, state, *args)


def queue_finish(
    pipe: Pipeline,
    state: str,
    request_stream: str,
    entry_id: str,
    stats_key: str,
    counters: dict[str, int],
    last_inference_ms: int,
) -> None:
    args: list[object] = [keys.SCHEDULER_GROUP, entry_id, last_inference_ms]
    for field, amount in counters.items():
        args.extend((field, amount))
    pipe.eval(FINISH_LUA, 3, state, request_stream, stats_key, *args)


def parse_state(flat: list[bytes] | None) -> dict[bytes, bytes] | None:
    """HGETALL's flat answer as a dict; None when the state is gone (finished or expired)."""
    if not flat:
        return None
    return dict(zip(flat[0::2], flat[1::2], strict=True))
