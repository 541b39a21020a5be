#!lua
-- sequence_release_idle: release a holding instance's idle sequences (nothing queued, no
-- activity for the idle timeout), forget entries that moved to another holder, then fill free
-- slots from the backlog (workers/sequence/store.py). Two phases: the caller reads the held
-- set's due entries and the backlog's oldest sequences, then passes their keys here. What it
-- was given is checked again: an entry no longer due is left alone, a due entry or backlog
-- head not passed waits for the next call.
--
-- KEYS[1] this instance's held set: keys.sequence_held(model, version, instance)
-- KEYS[2] this instance's doorbells: keys.sequence_bell(model, version, instance)
-- KEYS[3] the backlog: keys.sequence_backlog(model, version)
-- KEYS[4..] per due sequence: keys.sequence_binding(model, version, sequence), then
--           keys.sequence_queue(model, version, sequence); then per backlogged sequence:
--           keys.sequence_binding(model, version, sequence)
-- ARGV[1] NOW (ms)
-- ARGV[2] this instance
-- ARGV[3] idle timeout (ms)
-- ARGV[4] this instance's slots
-- ARGV[5] n, the number of due sequences
-- ARGV[6..] the n due sequences, then m, the number of backlogged sequences, then those m
-- Reply: {released sequences..., '', stale sequences...}.
--
-- Bindings are written by sequence_admit.lua and sequence_commit.lua; sequence_adopt.lua moves
-- them (stale entries here).
--#include _sequence_lib.lua
--#include _sequence_pull.lua
local me, idle, cap, n = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
HELD[me], BELL[me], BACKLOG = 1, 2, 3
local first_head = pairs_of(B, Q, 4, 6, n)
local m = tonumber(ARGV[6 + n])
for j = 0, m - 1 do
  if B[ARGV[7 + n + j]] == nil then B[ARGV[7 + n + j]] = first_head + j end
end
local released, stale = {}, {}
for j = 0, n - 1 do
  local seq = ARGV[6 + j]
  local deadline = redis.call('ZSCORE', KEYS[1], seq)
  if deadline ~= false and tonumber(deadline) <= NOW then
    if redis.call('HGET', KEYS[B[seq]], 'holder') ~= me then
      redis.call('ZREM', KEYS[1], seq)
      stale[#stale + 1] = seq
    elseif idle_now(seq, idle) then
      release(seq, me)
      released[#released + 1] = seq
    else
      redis.call('ZADD', KEYS[1], NOW + idle, seq)
    end
  end
end
pull(me, cap, idle)
local out = released
out[#out + 1] = ''
for _, seq in ipairs(stale) do out[#out + 1] = seq end
return out
