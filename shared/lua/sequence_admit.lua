#!lua
-- sequence_admit: admit one step of a sequence (gateway/core/sequence_admission.py): bind a new
-- sequence to the live instance with the lowest share of its slots in use (or the backlog),
-- refuse a step without START for a sequence unknown, ended or idle-released, queue the step
-- behind the sequence's earlier ones and ring the holder's doorbell.
--
-- KEYS[1] readiness set: keys.ready(model, version)
-- KEYS[2] the sequence's binding: keys.sequence_binding(model, version, sequence)
-- KEYS[3] the sequence's queue: keys.sequence_queue(model, version, sequence)
-- KEYS[4] admission record: keys.admitted(model, request_id)
-- Built from P inside (see _sequence_lib.lua): keys.sequence_slots, keys.sequence_held and
-- keys.sequence_bell of any instance, keys.sequence_backlog, and keys.sequence_binding and
-- keys.sequence_queue of the sequences found there.
-- ARGV[1] P: keys.sequence_prefix(model, version)
-- ARGV[2] NOW (ms)
-- ARGV[3] idle timeout (ms)
-- ARGV[4] binding and queue TTL (ms)
-- ARGV[5] START (0/1)
-- ARGV[6] END (0/1)
-- ARGV[7] the sequence (its correlation key)
-- ARGV[8] the step's request (envelope)
-- ARGV[9] milliseconds to keep the admission record
-- ARGV[10] oldest readiness expiry (ms) that still counts as live
-- Reply: {code, idle released (0/1), backlogged (0/1)}; code 1 queued, 2 duplicate, -1 no live
-- worker, -3 no START for a sequence unknown, ended or idle-released.
--
-- Reads the readiness set (mark_ready.lua), the slots and held sets the holders keep
-- (sequence_commit.lua, sequence_release_idle.lua, sequence_adopt.lua, sequence_cancel.lua write
-- them) and the binding's counters (sequence_commit.lua). BELL_PAYLOAD_MAX is
-- gateway/core/sequence_admission.py's (a test checks they agree).
local BELL_PAYLOAD_MAX = 65536
--#include _sequence_lib.lua
local ready, b, q = KEYS[1], KEYS[2], KEYS[3]
local idle, ttl = tonumber(ARGV[3]), tonumber(ARGV[4])
local start, finish, seq = ARGV[5] == '1', ARGV[6] == '1', ARGV[7]
if redis.call('ZCOUNT', ready, tonumber(ARGV[10]), '+inf') == 0 then return {-1, 0, 0} end
if redis.call('SET', KEYS[4], '1', 'NX', 'PX', tonumber(ARGV[9])) == false then
  return {2, 0, 0}
end
local holder = redis.call('HGET', b, 'holder')
local released = 0
if holder ~= false and idle_now(seq, idle) then
  release(seq, holder)
  holder, released = false, 1
end
if not start and (holder == false or redis.call('HGET', b, 'open') == '0') then
  redis.call('DEL', KEYS[4])
  return {-3, released, 0}
end
if holder == false then
  redis.call('HSET', b, 'admitted', 0, 'committed', 0)
  holder = bind(seq, choose(ready, nil), idle, 1, true)
end
local step = redis.call('HINCRBY', b, 'admitted', 1)
redis.call('RPUSH', q, step .. ':' .. ARGV[8])
redis.call('HSET', b, 'open', finish and '0' or '1', 'last', NOW)
redis.call('PEXPIRE', b, ttl)
redis.call('PEXPIRE', q, ttl)
if holder ~= '' then
  redis.call('ZADD', P .. 'held:' .. holder, NOW + idle, seq)
  local bell = P .. 'bell:' .. holder
  if #ARGV[8] <= BELL_PAYLOAD_MAX then  -- the step rides along: the holder need not read it
    redis.call('XADD', bell, 'MAXLEN', '~', 1000, '*', 's', seq, 'n', step, 'd', ARGV[8])
  else
    redis.call('XADD', bell, 'MAXLEN', '~', 1000, '*', 's', seq, 'n', step)
  end
end
return {1, released, holder == '' and 1 or 0}
