-- Fragment (after _sequence_lib.lua): placement, for the scripts that choose a holder
-- (sequence_admit.lua, sequence_adopt.lua). Needs SLOTS and HELD of every instance in the slots
-- hash (slot_table names those missing).
local function worker_of(inst) return string.match(inst, '^(.*)#%d+$') or inst end

local function live(readiness, inst, since)
  local score = redis.call('ZSCORE', readiness, worker_of(inst))
  return score ~= false and tonumber(score) >= since
end

-- The slots hash (HGETALL's flat reply) and the instances in it whose keys were not passed.
local function slot_table()
  local slots = redis.call('HGETALL', KEYS[SLOTS])
  local missing = {}
  for i = 1, #slots, 2 do
    if HELD[slots[i]] == nil then missing[#missing + 1] = slots[i] end
  end
  return slots, missing
end

-- The live instance (heartbeat not yet expired) with a free slot and the lowest share of its
-- slots in use; nil when every slot of every live instance is taken. `slots` from slot_table,
-- with nothing missing.
local function choose(ready_set, slots, exclude)
  local best, best_share = nil, nil
  for i = 1, #slots, 2 do
    local inst, cap = slots[i], tonumber(slots[i + 1])
    if inst ~= exclude and cap > 0 and live(ready_set, inst, NOW) then
      local held = redis.call('ZCARD', KEYS[HELD[inst]])
      if held < cap then
        local share = held / cap
        if best == nil or share < best_share then best, best_share = inst, share end
      end
    end
  end
  return best
end
