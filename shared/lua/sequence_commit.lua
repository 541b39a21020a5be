#!lua
-- sequence_commit: the fenced commit of one execution of a holding instance
-- (workers/sequence/store.py). Per step: only the holder, only the step after the last
-- committed one, only the step at the head of the queue; then the step leaves the queue and its
-- state and counter are written together. An ended sequence with nothing queued after its END
-- is released and its slot goes to the backlog's oldest sequence. Statistics are added only
-- when some step was committed (a late holder counts nothing).
--
-- KEYS[1] this instance's held set: keys.sequence_held(model, version, instance)
-- KEYS[2] statistics: keys.stats(model, version)
-- KEYS[3..] per step: keys.sequence_binding(model, version, sequence), then
--           keys.sequence_queue(model, version, sequence)
-- Built from P inside (see _sequence_lib.lua): keys.sequence_slots, keys.sequence_held and
-- keys.sequence_bell of any instance, keys.sequence_backlog, and keys.sequence_binding and
-- keys.sequence_queue of the sequences found there.
-- ARGV[1] P: keys.sequence_prefix(model, version)
-- ARGV[2] NOW (ms)
-- ARGV[3] this instance
-- ARGV[4] idle timeout (ms)
-- ARGV[5] binding and queue TTL (ms)
-- ARGV[6] this instance's slots
-- ARGV[7] n, the number of steps
-- ARGV[8..] per step: sequence, step, ended (0/1), state count, then per state: input name,
--           shape, bytes; then counter count, last inference ms, then per counter: field, amount
-- Reply: per step: code (0 not the holder, 1 committed, 2 already committed, 3 out of order,
-- 4 committed and released), next head (or ''); then how many backlogged sequences it took.
--
-- The queue is filled by sequence_admit.lua; the committed counter and state are read by
-- sequence_admit.lua (idle), sequence_adopt.lua and the holder's restore.
--#include _sequence_lib.lua
--#include _sequence_pull.lua
local me, idle, ttl, cap, n = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]),
  tonumber(ARGV[7])
local held = KEYS[1]
local out = {}
local committed, released = false, false
local a = 8
for i = 1, n do
  local seq, step, ended, ns = ARGV[a], tonumber(ARGV[a + 1]), ARGV[a + 2] == '1',
    tonumber(ARGV[a + 3])
  a = a + 4
  local b, q = KEYS[1 + 2 * i], KEYS[2 + 2 * i]
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
if committed and m > 0 then
  for j = 1, m do
    redis.call('HINCRBY', KEYS[2], ARGV[a + 2 * j], ARGV[a + 2 * j + 1])
  end
  redis.call('HSET', KEYS[2], 'last_inference', ARGV[a + 1])
end
local pulled = 0
if released then pulled = pull(me, cap, idle) end
out[#out + 1] = pulled
return out
