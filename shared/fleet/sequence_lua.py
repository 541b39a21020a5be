"""The Lua the sequence scripts share: who may hold a sequence, and how a binding moves.

A sequence is bound to one execution instance ("holder", ``<worker id>#<index>``). New and
orphaned sequences go to the live instance with the lowest share of its slots in use ("score,
don't pin": placement is scored, and a binding moves only when its holder is gone). Every script
that places, moves or releases a sequence starts with this library, so the gateway's admission
and the workers' adoption and commit agree to the letter.

Conventions of every script: ``P`` is ``keys.sequence_prefix(model, version)`` and ``NOW`` the
caller's clock in ms; the per-sequence and per-instance keys are built from ``P`` inside the
script. They carry the model's hash tag, so they live in the script's one cluster slot.

Binding fields (``P..'s:'..seq``): ``holder`` (instance, or '' while backlogged), ``admitted``
(last step admitted), ``committed`` (last step whose outcome and state are committed), ``open``
('0' once an END was admitted), ``last`` (ms of the last admission or commit), and per implicit
state ``st:<input>`` (bytes) and ``sh:<input>`` (shape, comma-separated).
"""

from __future__ import annotations

LIBRARY = """
local function worker_of(inst) return string.match(inst, '^(.*)#%d+$') or inst end

local function live(ready, inst, since)
  local score = redis.call('ZSCORE', ready, worker_of(inst))
  return score ~= false and tonumber(score) >= since
end

-- The live instance (heartbeat not yet expired) with a free slot and the lowest share of its
-- slots in use; nil when every slot of every live instance is taken.
local function choose(ready, exclude)
  local slots = redis.call('HGETALL', P .. 'slots')
  local best, best_share = nil, nil
  for i = 1, #slots, 2 do
    local inst, cap = slots[i], tonumber(slots[i + 1])
    if inst ~= exclude and cap > 0 and live(ready, inst, NOW) then
      local held = redis.call('ZCARD', P .. 'held:' .. inst)
      if held < cap then
        local share = held / cap
        if best == nil or share < best_share then best, best_share = inst, share end
      end
    end
  end
  return best
end

-- Bind to an instance (or to the backlog when inst is nil); ring the holder's doorbell unless
-- the caller rings it itself.
local function bind(seq, inst, idle, step, quiet)
  local b = P .. 's:' .. seq
  if inst == nil then
    redis.call('HSET', b, 'holder', '')
    redis.call('ZADD', P .. 'backlog', 'NX', NOW, seq)
    return ''
  end
  redis.call('HSET', b, 'holder', inst)
  redis.call('ZREM', P .. 'backlog', seq)
  redis.call('ZADD', P .. 'held:' .. inst, NOW + idle, seq)
  if not quiet then
    redis.call('XADD', P .. 'bell:' .. inst, 'MAXLEN', '~', 1000, '*', 's', seq, 'n', step)
  end
  return inst
end

local function release(seq, holder)
  redis.call('DEL', P .. 's:' .. seq, P .. 'q:' .. seq)
  if holder and holder ~= '' then redis.call('ZREM', P .. 'held:' .. holder, seq) end
  redis.call('ZREM', P .. 'backlog', seq)
end

-- Idle: nothing queued and no admission or commit for the idle timeout (Triton's reaper).
local function idle_now(seq, idle)
  local b = P .. 's:' .. seq
  local last = tonumber(redis.call('HGET', b, 'last') or '0')
  return redis.call('LLEN', P .. 'q:' .. seq) == 0 and NOW - last >= idle
end
"""
