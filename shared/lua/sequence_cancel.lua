#!lua
-- sequence_cancel: end a sequence one of whose requests was cancelled
-- (workers/sequence/cancels.py): release binding, committed state and queued steps, count the
-- cancel once; the freed slot goes to the backlog's oldest sequence (here when the caller
-- passed its keys, else by sequence_pull.lua with the sequences this script answers).
--
-- KEYS[1] this instance's held set: keys.sequence_held(model, version, instance)
-- KEYS[2] this instance's doorbells: keys.sequence_bell(model, version, instance)
-- KEYS[3] the backlog: keys.sequence_backlog(model, version)
-- KEYS[4] statistics: keys.stats(model, version)
-- KEYS[5] the sequence's binding: keys.sequence_binding(model, version, sequence)
-- KEYS[6] the sequence's queue: keys.sequence_queue(model, version, sequence)
-- KEYS[7..] per backlogged sequence the caller knows of (the backlog's oldest as it last read
--           it): keys.sequence_binding(model, version, sequence)
-- ARGV[1] NOW (ms)
-- ARGV[2] this instance
-- ARGV[3] idle timeout (ms)
-- ARGV[4] this instance's slots
-- ARGV[5] count the cancel (0/1)
-- ARGV[6] the sequence
-- ARGV[7] m, the number of backlogged sequences passed
-- ARGV[8..] those m sequences, in the order of their keys
-- Reply: {the sequence's queued entries ("<step>:<request>") as they were, how many backlogged
-- sequences it took into the freed slot, the backlog's oldest sequences still to take whose
-- keys were not passed (for sequence_pull.lua)}; {{}, 0, {}} when this instance no longer
-- holds it (nothing done).
--
-- The queue is filled by sequence_admit.lua; after the release, sequence_admit.lua refuses the
-- sequence's later steps without START.
--#include _sequence_lib.lua
--#include _sequence_pull.lua
local me, idle, cap, seq = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[6]
HELD[me], BELL[me], BACKLOG = 1, 2, 3
for j = 1, tonumber(ARGV[7]) do B[ARGV[7 + j]] = 6 + j end
B[seq], Q[seq] = 5, 6
if redis.call('HGET', KEYS[5], 'holder') ~= me then return {{}, 0, {}} end
local entries = redis.call('LRANGE', KEYS[6], 0, -1)
release(seq, me)
if ARGV[5] == '1' then redis.call('HINCRBY', KEYS[4], 'cancel_count', 1) end
local got, more = pull(me, cap, idle)
return {entries, got, more}
