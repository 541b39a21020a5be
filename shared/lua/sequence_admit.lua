#!lua
-- sequence_admit: admit one step of a sequence (gateway/core/sequence_admission.py): bind a new
-- sequence to the live instance with the lowest share of its slots in use (or the backlog),
-- refuse a step without START for a sequence unknown, ended or idle-released, queue the step
-- behind the sequence's earlier ones and ring the holder's doorbell. The caller passes the keys
-- of the instances it knows (its cache of the slots hash); when the sequence's holder, or, for
-- a sequence to place, an instance of the slots hash is not among them, nothing is done and
-- the reply names the instances missing (the caller refreshes its cache and calls again).
--
-- KEYS[1] readiness set: keys.ready(model, version)
-- KEYS[2] the sequence's binding: keys.sequence_binding(model, version, sequence)
-- KEYS[3] the sequence's queue: keys.sequence_queue(model, version, sequence)
-- KEYS[4] admission record: keys.admitted(model, request_id)
-- KEYS[5] the slots hash: keys.sequence_slots(model, version)
-- KEYS[6] the backlog: keys.sequence_backlog(model, version)
-- KEYS[7..] per instance known: keys.sequence_held(model, version, instance), then
--           keys.sequence_bell(model, version, instance)
-- ARGV[1] NOW (ms)
-- ARGV[2] idle timeout (ms)
-- ARGV[3] binding and queue TTL (ms)
-- ARGV[4] START (0/1)
-- ARGV[5] END (0/1)
-- ARGV[6] the sequence (its correlation key)
-- ARGV[7] the step's request (envelope)
-- ARGV[8] milliseconds to keep the admission record
-- ARGV[9] oldest readiness expiry (ms) that still counts as live
-- ARGV[10] k, the number of instances known
-- ARGV[11..] the k instances, in the order of their keys
-- Reply: {code, idle released (0/1), backlogged (0/1), instances missing...}; code 1 queued,
-- 2 duplicate, -1 no live worker, -3 no START for a sequence unknown, ended or idle-released,
-- -4 stale instance list (the instances missing follow; nothing was written).
--
-- Reads the readiness set (mark_ready.lua), the slots and held sets the holders keep
-- (sequence_commit.lua, sequence_release_idle.lua, sequence_adopt.lua, sequence_cancel.lua,
-- sequence_pull.lua write them) and the binding's counters (sequence_commit.lua).
-- BELL_PAYLOAD_MAX is gateway/core/sequence_admission.py's (a test checks they agree).
local BELL_PAYLOAD_MAX = 65536
--#include _sequence_lib.lua
--#include _sequence_place.lua
local ready, b, q = KEYS[1], KEYS[2], KEYS[3]
local idle, ttl = tonumber(ARGV[2]), tonumber(ARGV[3])
local start, finish, seq = ARGV[4] == '1', ARGV[5] == '1', ARGV[6]
SLOTS, BACKLOG = 5, 6
B[seq], Q[seq] = 2, 3
pairs_of(HELD, BELL, 7, 11, tonumber(ARGV[10]))
if redis.call('ZCOUNT', ready, tonumber(ARGV[9]), '+inf') == 0 then return {-1, 0, 0} end
-- Everything this call may touch is checked before the first write.
local holder = redis.call('HGET', b, 'holder')
if holder ~= false and holder ~= '' and HELD[holder] == nil then return {-4, 0, 0, holder} end
local idled = holder ~= false and idle_now(seq, idle)
local slots = nil
if start and (holder == false or idled) then
  local missing
  slots, missing = slot_table()
  if #missing > 0 then return {-4, 0, 0, unpack(missing)} end
end
if redis.call('SET', KEYS[4], '1', 'NX', 'PX', tonumber(ARGV[8])) == false then
  return {2, 0, 0}
end
local released = 0
if idled then
  release(seq, holder)
  holder, released = false, 1
end
if not start and (holder == false or redis.call('HGET', b, 'open') == '0') then
  redis.call('DEL', KEYS[4])
  return {-3, released, 0}
end
if holder == false then
  redis.call('HSET', b, 'admitted', 0, 'committed', 0)
  holder = bind(seq, choose(ready, slots, nil), idle, 1, true)
end
local step = redis.call('HINCRBY', b, 'admitted', 1)
redis.call('RPUSH', q, step .. ':' .. ARGV[7])
redis.call('HSET', b, 'open', finish and '0' or '1', 'last', NOW)
redis.call('PEXPIRE', b, ttl)
redis.call('PEXPIRE', q, ttl)
if holder ~= '' then
  redis.call('ZADD', KEYS[HELD[holder]], NOW + idle, seq)
  local bell = KEYS[BELL[holder]]
  if #ARGV[7] <= BELL_PAYLOAD_MAX then  -- the step rides along: the holder need not read it
    redis.call('XADD', bell, 'MAXLEN', '~', 1000, '*', 's', seq, 'n', step, 'd', ARGV[7])
  else
    redis.call('XADD', bell, 'MAXLEN', '~', 1000, '*', 's', seq, 'n', step)
  end
end
return {1, released, holder == '' and 1 or 0}
