#!lua
-- sequence_pull: take backlogged sequences into a holding instance's free slots, oldest first
-- (workers/sequence/store.py), after sequence_commit.lua or sequence_cancel.lua released a
-- sequence and answered the backlog's oldest sequences (their keys were not in its KEYS).
--
-- KEYS[1] this instance's held set: keys.sequence_held(model, version, instance)
-- KEYS[2] this instance's doorbells: keys.sequence_bell(model, version, instance)
-- KEYS[3] the backlog: keys.sequence_backlog(model, version)
-- KEYS[4..] per backlogged sequence to take: keys.sequence_binding(model, version, sequence)
-- ARGV[1] NOW (ms)
-- ARGV[2] this instance
-- ARGV[3] idle timeout (ms)
-- ARGV[4] this instance's slots
-- ARGV[5] n, the number of backlogged sequences passed
-- ARGV[6..] the n sequences, in the order of their keys
-- Reply: {how many it took, the backlog's oldest sequences still to take whose keys were not
-- passed (call again with them; {} when done)}.
--
-- The backlog and the backlogged bindings are written by sequence_admit.lua and
-- sequence_adopt.lua; a sequence taken is bound here and rung on this instance's doorbell.
--#include _sequence_lib.lua
--#include _sequence_pull.lua
local me, idle, cap, n = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
HELD[me], BELL[me], BACKLOG = 1, 2, 3
for j = 0, n - 1 do B[ARGV[6 + j]] = 4 + j end
local got, more = pull(me, cap, idle)
return {got, more}
