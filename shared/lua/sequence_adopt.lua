#!lua
-- sequence_adopt: move every sequence of a gone instance (workers/sequence/adoption.py): idle
-- ones are released, the others go to the live instance with the most free slots (or the
-- backlog) with their queued steps and committed state; then the instance's slots, held set and
-- doorbells are removed. Refused while its worker is live, unless forced (a clean handover).
-- Two phases: the caller reads the gone instance's held set and the slots hash, then passes
-- their keys here; when either names something not passed, nothing is done and the caller
-- reads again (reply -2).
--
-- KEYS[1] readiness set: keys.ready(model, version)
-- KEYS[2] the slots hash: keys.sequence_slots(model, version)
-- KEYS[3] the backlog: keys.sequence_backlog(model, version)
-- KEYS[4..] per instance (the gone one first, then those of the slots hash):
--           keys.sequence_held(model, version, instance), then
--           keys.sequence_bell(model, version, instance); then per sequence of the gone
--           instance's held set: keys.sequence_binding(model, version, sequence), then
--           keys.sequence_queue(model, version, sequence)
-- ARGV[1] NOW (ms)
-- ARGV[2] dead-before (ms): a heartbeat expiry older than this is dead
-- ARGV[3] idle timeout (ms)
-- ARGV[4] force (0/1)
-- ARGV[5] k, the number of instances (the gone one first)
-- ARGV[6..] the k instances, then n, the number of sequences, then those n
-- Reply: {done (1; -1 refused: the instance is live; -2 retry: the held set or the slots hash
-- names something not passed), adopted, released, backlogged}.
--
-- Reads the readiness set (mark_ready.lua) and what sequence_admit.lua and sequence_commit.lua
-- write; the new holders find the adopted sequences on their doorbells.
--#include _sequence_lib.lua
--#include _sequence_place.lua
local idle, k = tonumber(ARGV[3]), tonumber(ARGV[5])
local dead = ARGV[6]
SLOTS, BACKLOG = 2, 3
local first_seq = pairs_of(HELD, BELL, 4, 6, k)
local n = tonumber(ARGV[6 + k])
pairs_of(B, Q, first_seq, 7 + k, n)
if ARGV[4] ~= '1' and live(KEYS[1], dead, tonumber(ARGV[2])) then return {-1, 0, 0, 0} end
local slots, missing = slot_table()
local held = redis.call('ZRANGE', KEYS[HELD[dead]], 0, -1)
for _, seq in ipairs(held) do
  if B[seq] == nil then missing[#missing + 1] = seq end
end
if #missing > 0 then return {-2, 0, 0, 0} end
local adopted, released, backlogged = 0, 0, 0
for _, seq in ipairs(held) do
  if redis.call('HGET', KEYS[B[seq]], 'holder') == dead then
    if idle_now(seq, idle) then
      release(seq, dead)
      released = released + 1
    elseif bind(seq, choose(KEYS[1], slots, dead), idle, 0) == '' then
      backlogged = backlogged + 1
    else
      adopted = adopted + 1
    end
  end
end
redis.call('DEL', KEYS[HELD[dead]], KEYS[BELL[dead]])
redis.call('HDEL', KEYS[SLOTS], dead)
return {1, adopted, released, backlogged}
