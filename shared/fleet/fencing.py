"""Fenced writes: a consumer acts on a stream entry only while it still owns it.

Ownership of an entry is the consumer group's pending list: the entry is the consumer's while
``XPENDING <stream> <group> <id> <id> 1 <consumer>`` lists it. Once another consumer claims it
(``XCLAIM`` with a min-idle bound, after the owner's heartbeat is older than the dead bound), the
old owner's ack, statistics and dispatch are refused by these scripts, atomically: a late owner
gets 0 back, counts a late result, and does nothing else. Each script replaces the commands it
fences (no extra round trip), touches the keys of one model only (one hash tag, one Redis
Cluster slot), and is safe to run twice: redis-py sends a pipeline again when its connection drops
after the pipeline went out, and a second run finds nothing left to do.

Replies to the gateways are separate commands before the fenced ack (a gateway's reply stream
lives in another slot); the gateway keeps the first reply per request id. Inside each script the
writes that may be refused (out of memory: XADD, HINCRBY) come before the ack and delete, so a
script that fails half-way has taken nothing off its stream.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from redis.asyncio.client import Pipeline

from shared.wire import keys

# KEYS: the stream, the statistics hash. ARGV: group, consumer, entry id, batch-done channel
# ('' for none), last_inference (ms), the batch's size (0: not recorded), then counter name and
# amount pairs. Returns 1 when the entry was this consumer's (acked, deleted, counted,
# announced), 0 when it was not. The size is kept as ``last_batch``: the admission script's
# direct path is taken only while the version's executions are batches of one.
FENCED_ACK_LUA = """
if #redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1, ARGV[2]) == 0 then
  return 0
end
if #ARGV > 6 then
  for i = 7, #ARGV, 2 do redis.call('HINCRBY', KEYS[2], ARGV[i], ARGV[i + 1]) end
  redis.call('HSET', KEYS[2], 'last_inference', ARGV[5])
end
if ARGV[6] ~= '0' then redis.call('HSET', KEYS[2], 'last_batch', ARGV[6]) end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[1], ARGV[3])
if ARGV[4] ~= '' then redis.call('PUBLISH', ARGV[4], '') end
return 1
"""


def ack_many_lua(counter: str) -> str:
    """The script that acks and deletes the entries a consumer still owns among those named, adds
    their number to the statistics field ``counter`` and returns it. KEYS: the statistics hash,
    then the request streams. ARGV: group, consumer, then per stream: how many ids, the ids."""
    return f"""
local owned = {{}}
local at = 3
for k = 2, #KEYS do
  local n = tonumber(ARGV[at])
  for i = at + 1, at + n do
    if #redis.call('XPENDING', KEYS[k], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2]) > 0 then
      owned[#owned + 1] = {{k, ARGV[i]}}
    end
  end
  at = at + n + 1
end
if #owned == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], '{counter}', #owned)
for _, entry in ipairs(owned) do
  redis.call('XACK', KEYS[entry[1]], ARGV[1], entry[2])
  redis.call('XDEL', KEYS[entry[1]], entry[2])
end
return #owned
"""


# Counted as failures: the scheduler answering requests with an error.
FENCED_ACK_MANY_LUA = ack_many_lua("fail_count")

# KEYS: the batch stream, then the request streams. ARGV: group, consumer, the batch, then per
# stream: how many ids, the ids. All or nothing: when every request entry is still this
# consumer's, the batch is added and the entries acked and deleted, and the batch stream's
# length is returned as {length}; otherwise nothing is written and {-1, index, id, ...} names
# the entries that are not (index: 1 for the first request stream). Ownership is read with one
# XPENDING over the range from a stream's first id to its last (the ids come in stream order
# when the batch takes its requests in arrival order), limited to this consumer and to as many
# entries as were named; an id that range did not list (ids out of order, or other entries of
# this consumer in between) is asked about alone.
DISPATCH_LUA = """
local missing = {-1}
local at = 4
for k = 2, #KEYS do
  local n = tonumber(ARGV[at])
  local listed = {}
  if n > 1 then
    local rows = redis.call('XPENDING', KEYS[k], ARGV[1], ARGV[at + 1], ARGV[at + n], n, ARGV[2])
    for _, row in ipairs(rows) do listed[row[1]] = true end
  end
  for i = at + 1, at + n do
    if not listed[ARGV[i]]
        and #redis.call('XPENDING', KEYS[k], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2]) == 0 then
      missing[#missing + 1] = k - 1
      missing[#missing + 1] = ARGV[i]
    end
  end
  at = at + n + 1
end
if #missing > 1 then return missing end
redis.call('XADD', KEYS[1], '*', 'd', ARGV[3])
at = 4
for k = 2, #KEYS do
  local n = tonumber(ARGV[at])
  redis.call('XACK', KEYS[k], ARGV[1], unpack(ARGV, at + 1, at + n))
  redis.call('XDEL', KEYS[k], unpack(ARGV, at + 1, at + n))
  at = at + n + 1
end
return {redis.call('XLEN', KEYS[1])}
"""


def queue_fenced_ack(
    pipe: Pipeline,
    stream: str | bytes,
    stats_key: str,
    group: str,
    consumer: str,
    entry_id: bytes,
    done_channel: str = "",
    counters: Mapping[str, int] | None = None,
    last_inference_ms: int = 0,
    batch_size: int = 0,
) -> None:
    """Queue the fenced ack of one entry (its answer is 1: acked, or 0: no longer ours).

    EVAL with the source rather than EVALSHA: a pipeline then never meets NOSCRIPT after a
    Redis restart, and Redis caches the compiled script by its digest anyway."""
    args: list[object] = [group, consumer, entry_id, done_channel, last_inference_ms, batch_size]
    for field, amount in (counters or {}).items():
        args.extend((field, amount))
    pipe.eval(FENCED_ACK_LUA, 2, stream, stats_key, *args)


def queue_fenced_ack_many(
    pipe: Pipeline,
    stats_key: str,
    group: str,
    consumer: str,
    ids_by_stream: Mapping[bytes, Sequence[bytes]],
) -> None:
    """Queue the fenced ack of entries of several streams of one model, counted as failures
    (the scheduler answering requests with an error); the answer is how many were acked."""
    args: list[object] = [group, consumer]
    for ids in ids_by_stream.values():
        args.append(len(ids))
        args.extend(ids)
    pipe.eval(FENCED_ACK_MANY_LUA, 1 + len(ids_by_stream), stats_key, *ids_by_stream, *args)


def dispatch_args(
    batch_stream: str, consumer: str, batch: bytes, ids_by_stream: Mapping[bytes, Sequence[bytes]]
) -> tuple[list[object], list[object]]:
    """The keys and arguments of ``DISPATCH_LUA`` for one batch."""
    args: list[object] = [keys.SCHEDULER_GROUP, consumer, batch]
    for ids in ids_by_stream.values():
        args.append(len(ids))
        args.extend(ids)
    return [batch_stream, *ids_by_stream], args
