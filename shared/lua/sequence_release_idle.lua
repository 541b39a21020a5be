#!lua
-- sequence_release_idle: release a holding instance's idle sequences (nothing queued, no
-- activity for the idle timeout), forget entries that moved to another holder, then fill free
-- slots from the backlog (workers/sequence/store.py).
--
-- KEYS[1] this instance's held set: keys.sequence_held(model, version, instance)
-- Built from P inside (see _sequence_lib.lua): keys.sequence_slots, keys.sequence_held and
-- keys.sequence_bell of any instance, keys.sequence_backlog, and keys.sequence_binding and
-- keys.sequence_queue of the sequences found there.
-- ARGV[1] P: keys.sequence_prefix(model, version)
-- ARGV[2] NOW (ms)
-- ARGV[3] this instance
-- ARGV[4] idle timeout (ms)
-- ARGV[5] this instance's slots
-- Reply: {released sequences..., '', stale sequences...}.
--
-- Bindings are written by sequence_admit.lua and sequence_commit.lua; sequence_adopt.lua moves
-- them (stale entries here).
--#include _sequence_lib.lua
--#include _sequence_pull.lua
local me, idle, cap = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', NOW)
local released, stale = {}, {}
for _, seq in ipairs(due) do
  if redis.call('HGET', P .. 's:' .. seq, 'holder') ~= me then
    redis.call('ZREM', KEYS[1], seq)
    stale[#stale + 1] = seq
  elseif idle_now(seq, idle) then
    release(seq, me)
    released[#released + 1] = seq
  else
    redis.call('ZADD', KEYS[1], NOW + idle, seq)
  end
end
pull(me, cap, idle)
local out = released
out[#out + 1] = ''
for _, seq in ipairs(stale) do out[#out + 1] = seq end
return out
