#!lua
-- sequence_cancel: end a sequence one of whose requests was cancelled
-- (workers/sequence/cancels.py): release binding, committed state and queued steps, count the
-- cancel once, give the slot to the oldest backlogged sequence.
--
-- KEYS[1] this instance's held set: keys.sequence_held(model, version, instance)
-- KEYS[2] statistics: keys.stats(model, version)
-- Built from P inside (see _sequence_lib.lua): keys.sequence_slots, keys.sequence_held and
-- keys.sequence_bell of any instance, keys.sequence_backlog, and keys.sequence_binding and
-- keys.sequence_queue of the sequences found there.
-- ARGV[1] P: keys.sequence_prefix(model, version)
-- ARGV[2] NOW (ms)
-- ARGV[3] this instance
-- ARGV[4] idle timeout (ms)
-- ARGV[5] this instance's slots
-- ARGV[6] count the cancel (0/1)
-- ARGV[7] the sequence
-- Reply: the sequence's queued entries ("<step>:<request>") as they were; {} when this instance
-- no longer holds it (nothing done).
--
-- The queue is filled by sequence_admit.lua; after the release, sequence_admit.lua refuses the
-- sequence's later steps without START.
--#include _sequence_lib.lua
--#include _sequence_pull.lua
local me, idle, cap, seq = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[7]
if redis.call('HGET', P .. 's:' .. seq, 'holder') ~= me then return {} end
local entries = redis.call('LRANGE', P .. 'q:' .. seq, 0, -1)
release(seq, me)
if ARGV[6] == '1' then redis.call('HINCRBY', KEYS[2], 'cancel_count', 1) end
pull(me, cap, idle)
return entries
