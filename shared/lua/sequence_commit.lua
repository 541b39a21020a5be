#!lua
-- sequence_commit: the fenced commit of one execution of a holding instance
-- (workers/sequence/store.py). Per step: only the holder, only the step after the last
-- committed one, only the step at the head of the queue; then the step leaves the queue and its
-- state and counter are written together. An ended sequence with nothing queued after its END
-- is released; the freed slot goes to the backlog's oldest sequence (here when the caller
-- passed its keys, else by sequence_pull.lua). Statistics are added only when some step was
-- committed (a late holder counts nothing).
--
-- KEYS[1] this instance's held set: keys.sequence_held(model, version, instance)
-- KEYS[2] this instance's doorbells: keys.sequence_bell(model, version, instance)
-- KEYS[3] the backlog: keys.sequence_backlog(model, version)
-- KEYS[4] statistics: keys.stats(model, version)
-- KEYS[5..] per step: keys.sequence_binding(model, version, sequence), then
--           keys.sequence_queue(model, version, sequence); then per backlogged sequence the
--           caller knows of: keys.sequence_binding(model, version, sequence)
-- ARGV[1] NOW (ms)
-- ARGV[2] this instance
-- ARGV[3] idle timeout (ms)
-- ARGV[4] binding and queue TTL (ms)
-- ARGV[5] this instance's slots
-- ARGV[6] n, the number of steps
-- ARGV[7..] per step: sequence, step, ended (0/1), state count, then per state: input name,
--           shape, bytes; then counter count, last inference ms, then per counter: field, amount;
--           then m, the number of backlogged sequences passed (the backlog's oldest as the
--           caller last read it; none unless a step ends its sequence), then those m
-- Reply: per step: code (0 not the holder, 1 committed, 2 already committed, 3 out of order,
-- 4 committed and released), next head (or ''); then how many backlogged sequences it took into
-- the slots freed, and the backlog's oldest sequences still to take whose keys were not passed
-- (for sequence_pull.lua; {} when none).
--
-- The queue is filled by sequence_admit.lua; the committed counter and state are read by
-- sequence_admit.lua (idle), sequence_adopt.lua and the holder's restore.
--#include _sequence_lib.lua
--#include _sequence_pull.lua
local me, idle, ttl, cap, n = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]),
  tonumber(ARGV[6])
local held = KEYS[1]
HELD[me], BELL[me], BACKLOG = 1, 2, 3
local out = {}
local committed, released = false, false
local a = 7
for i = 1, n do
  local seq, step, ended, ns = ARGV[a], tonumber(ARGV[a + 1]), ARGV[a + 2] == '1',
    tonumber(ARGV[a + 3])
  a = a + 4
  local b, q = KEYS[3 + 2 * i], KEYS[4 + 2 * i]
  B[seq], Q[seq] = 3 + 2 * i, 4 + 2 * i
  local code = 0
  if redis.call('HGET', b, 'holder') == me then
    local done = tonumber(redis.call('HGET', b, 'committed') or '0')
    local head = redis.call('LINDEX', q, 0)
    local head_step = head and tonumber(string.match(head, '^(%d+):'))
    if done >= step then
      code = 2
      if head_step and head_step <= done then redis.call('LPOP', q) end
    elseif done + 1 ~= step or head_step ~= step then
      code = 3
    else
      redis.call('LPOP', q)
      redis.call('HSET', b, 'committed', step, 'last', NOW)
      for _ = 1, ns do
        redis.call('HSET', b, 'st:' .. ARGV[a], ARGV[a + 2], 'sh:' .. ARGV[a], ARGV[a + 1])
        a = a + 3
      end
      ns = 0
      committed = true
      if ended and redis.call('LLEN', q) == 0 and redis.call('HGET', b, 'open') == '0' then
        release(seq, me)
        released = true
        code = 4
      else
        redis.call('PEXPIRE', b, ttl)
        redis.call('PEXPIRE', q, ttl)
        redis.call('ZADD', held, NOW + idle, seq)
        code = 1
      end
    end
  end
  a = a + 3 * ns
  local following = ''
  if code == 1 or code == 2 or code == 3 then following = redis.call('LINDEX', q, 0) or '' end
  out[#out + 1] = code
  out[#out + 1] = following
end
local m = tonumber(ARGV[a])
local w = a + 2 + 2 * m  -- the backlogged sequences passed
for j = 1, tonumber(ARGV[w]) do
  if B[ARGV[w + j]] == nil then B[ARGV[w + j]] = 4 + 2 * n + j end
end
if committed and m > 0 then
  for j = 1, m do
    redis.call('HINCRBY', KEYS[4], ARGV[a + 2 * j], ARGV[a + 2 * j + 1])
  end
  redis.call('HSET', KEYS[4], 'last_inference', ARGV[a + 1])
end
local got, more = 0, {}
if released then got, more = pull(me, cap, idle) end
out[#out + 1] = got
out[#out + 1] = more
return out
