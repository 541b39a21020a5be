-- Fragment: what every sequence script shares (who may hold a sequence, how a binding moves),
-- so that the gateway's admission and the workers' commit, adoption and cancel agree to the
-- letter. Conventions: ARGV[1] is P, keys.sequence_prefix(model, version), and ARGV[2] NOW, the
-- caller's clock (ms). The per-sequence and per-instance keys are built from P here (the same
-- names as keys.sequence_binding/queue/slots/held/bell/backlog, the model's hash tag, so the
-- script's one cluster slot): the instances come from the slots hash and the sequences from
-- the backlog and held sets at run time, so no caller could name them in KEYS beforehand.
-- Binding fields (P..'s:'..seq): holder (instance, '' while backlogged), admitted, committed,
-- open ('0' once an END was admitted), last (ms), st:<input> and sh:<input> (implicit state).
local P, NOW = ARGV[1], tonumber(ARGV[2])

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
