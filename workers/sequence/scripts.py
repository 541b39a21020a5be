"""The Lua a holding instance runs: commit a batch of steps, release idle sequences, and adopt
(or hand over) the sequences of an instance that is gone.

Each starts with ``shared.fleet.sequence_lua.LIBRARY`` (``P`` the version's key prefix, ``NOW`` ms),
so placement and release follow the same rules as the gateway's admission.
"""

from __future__ import annotations

from shared.fleet.sequence_lua import LIBRARY

_HEAD = "local P, NOW = ARGV[1], tonumber(ARGV[2])\n" + LIBRARY

# Take backlogged sequences into this instance's free slots (oldest first).
_PULL = """
local function pull(me, cap, idle)
  local free = cap - redis.call('ZCARD', P .. 'held:' .. me)
  local got = 0
  while free > 0 do
    local first = redis.call('ZRANGE', P .. 'backlog', 0, 0)
    if #first == 0 then break end
    local seq = first[1]
    redis.call('ZREM', P .. 'backlog', seq)
    if redis.call('HGET', P .. 's:' .. seq, 'holder') == '' then
      bind(seq, me, idle, 0)
      free, got = free - 1, got + 1
    end
  end
  return got
end
"""

# The fenced commit of one execution. For each step: only the sequence's holder may commit,
# only the step after the last committed one, only the step at the head of the queue; then the
# step leaves the queue and its state and counter are written together. An ended sequence with
# nothing queued after its END is released (its slot goes to the backlog's oldest sequence).
# The statistics are added only when some step was committed, so a late holder counts nothing.
#
# KEYS: held, stats, then binding and queue of each step.
# ARGV: P, NOW, me, idle ms, ttl ms, slots, n, then per step: sequence, step, ended (0/1),
#       state count, then per state: input name, shape, bytes; then counter count, last
#       inference ms, then per counter: field, amount.
# Returns per step: code (0 not the holder, 1 committed, 2 already committed, 3 out of order,
# 4 committed and released), next head (or ''); then how many backlogged sequences it took.
COMMIT_LUA = (
    _HEAD
    + _PULL
    + """
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
"""
)

# Release this instance's idle sequences (nothing queued, no activity for the idle timeout),
# forget entries that moved to another holder, then fill free slots from the backlog.
# KEYS: held. ARGV: P, NOW, me, idle ms, slots. Returns {released..., '', stale...}.
RELEASE_IDLE_LUA = (
    _HEAD
    + _PULL
    + """
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
"""
)

# Move every sequence of a gone instance: idle ones are released, the others go to the live
# instance with the most free slots (or the backlog) with their queued steps and committed
# state; then the instance's slots, holder index and doorbells are removed. Refused while the
# instance's worker is live (heartbeat newer than dead-before), unless forced (a clean handover
# by the instance itself).
# KEYS: ready. ARGV: P, NOW, instance, dead-before ms, idle ms, force (0/1).
# Returns {done (1, or -1 refused), adopted, released, backlogged}.
ADOPT_LUA = (
    _HEAD
    + """
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
"""
)
