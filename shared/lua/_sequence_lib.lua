-- Fragment: what every sequence script shares (who may hold a sequence, how a binding moves),
-- so that the gateway's admission and the workers' commit, pull, adoption and cancel agree to
-- the letter. Conventions: ARGV[1] is NOW, the caller's clock (ms). Every key comes from KEYS
-- (all under the model's hash tag, the script's one cluster slot): the including script fills
-- these tables with KEYS indexes before calling the functions below, and checks that every
-- instance or sequence it may meet has its keys there (it answers "stale" or "retry" otherwise,
-- before writing anything):
--   SLOTS, BACKLOG   keys.sequence_slots, keys.sequence_backlog
--   HELD[inst], BELL[inst]   keys.sequence_held, keys.sequence_bell of an instance
--   B[seq], Q[seq]   keys.sequence_binding, keys.sequence_queue of a sequence
-- Binding fields (B[seq]): holder (instance, '' while backlogged), admitted, committed, open
-- ('0' once an END was admitted), last (ms), st:<input> and sh:<input> (implicit state).
local NOW = tonumber(ARGV[1])
local SLOTS, BACKLOG = nil, nil
local HELD, BELL, B, Q = {}, {}, {}, {}

-- Index n names found in ARGV from `arg` whose keys come as pairs in KEYS from `key`:
-- first[name] = the pair's first key, second[name] = its second. Returns the next free key.
local function pairs_of(first, second, key, arg, n)
  for j = 0, n - 1 do
    first[ARGV[arg + j]], second[ARGV[arg + j]] = key + 2 * j, key + 2 * j + 1
  end
  return key + 2 * n
end

-- Bind to an instance (or to the backlog when inst is nil); ring the holder's doorbell unless
-- the caller rings it itself.
local function bind(seq, inst, idle, step, quiet)
  if inst == nil then
    redis.call('HSET', KEYS[B[seq]], 'holder', '')
    redis.call('ZADD', KEYS[BACKLOG], 'NX', NOW, seq)
    return ''
  end
  redis.call('HSET', KEYS[B[seq]], 'holder', inst)
  redis.call('ZREM', KEYS[BACKLOG], seq)
  redis.call('ZADD', KEYS[HELD[inst]], NOW + idle, seq)
  if not quiet then
    redis.call('XADD', KEYS[BELL[inst]], 'MAXLEN', '~', 1000, '*', 's', seq, 'n', step)
  end
  return inst
end

local function release(seq, holder)
  redis.call('DEL', KEYS[B[seq]], KEYS[Q[seq]])
  if holder and holder ~= '' then redis.call('ZREM', KEYS[HELD[holder]], seq) end
  redis.call('ZREM', KEYS[BACKLOG], seq)
end

-- Idle: nothing queued and no admission or commit for the idle timeout (Triton's reaper).
local function idle_now(seq, idle)
  local last = tonumber(redis.call('HGET', KEYS[B[seq]], 'last') or '0')
  return redis.call('LLEN', KEYS[Q[seq]]) == 0 and NOW - last >= idle
end
