#!lua
-- sequence_adopt: move every sequence of a gone instance (workers/sequence/adoption.py): idle
-- ones are released, the others go to the live instance with the most free slots (or the
-- backlog) with their queued steps and committed state; then the instance's slots, held set and
-- doorbells are removed. Refused while its worker is live, unless forced (a clean handover).
--
-- KEYS[1] readiness set: keys.ready(model, version)
-- Built from P inside (see _sequence_lib.lua): keys.sequence_slots, keys.sequence_held and
-- keys.sequence_bell of any instance, keys.sequence_backlog, and keys.sequence_binding and
-- keys.sequence_queue of the sequences found there.
-- ARGV[1] P: keys.sequence_prefix(model, version)
-- ARGV[2] NOW (ms)
-- ARGV[3] the gone instance
-- ARGV[4] dead-before (ms): a heartbeat expiry older than this is dead
-- ARGV[5] idle timeout (ms)
-- ARGV[6] force (0/1)
-- Reply: {done (1, or -1 refused), adopted, released, backlogged}.
--
-- Reads the readiness set (mark_ready.lua) and what sequence_admit.lua and sequence_commit.lua
-- write; the new holders find the adopted sequences on their doorbells.
--#include _sequence_lib.lua
local dead, idle = ARGV[3], tonumber(ARGV[5])
if ARGV[6] ~= '1' and live(KEYS[1], dead, tonumber(ARGV[4])) then return {-1, 0, 0, 0} end
local adopted, released, backlogged = 0, 0, 0
for _, seq in ipairs(redis.call('ZRANGE', P .. 'held:' .. dead, 0, -1)) do
  if redis.call('HGET', P .. 's:' .. seq, 'holder') == dead then
    if idle_now(seq, idle) then
      release(seq, dead)
      released = released + 1
    elseif bind(seq, choose(KEYS[1], dead), idle, 0) == '' then
      backlogged = backlogged + 1
    else
      adopted = adopted + 1
    end
  end
end
redis.call('DEL', P .. 'held:' .. dead, P .. 'bell:' .. dead)
redis.call('HDEL', P .. 'slots', dead)
return {1, adopted, released, backlogged}
