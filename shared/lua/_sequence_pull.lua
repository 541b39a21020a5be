-- Fragment (after _sequence_lib.lua): take backlogged sequences into this instance's free
-- slots, oldest first, as far as the caller passed their bindings (B). Returns how many it
-- took, and the backlog's oldest sequences it could not take for want of their keys (as many
-- as free slots remain; {} when the backlog is empty or no slot is free): the caller passes
-- those to sequence_pull.lua. Needs HELD[me], BELL[me] and BACKLOG.
local function pull(me, cap, idle)
  local free = cap - redis.call('ZCARD', KEYS[HELD[me]])
  local got = 0
  while free > 0 do
    local first = redis.call('ZRANGE', KEYS[BACKLOG], 0, 0)
    if #first == 0 then break end
    local seq = first[1]
    if B[seq] == nil then return got, redis.call('ZRANGE', KEYS[BACKLOG], 0, free - 1) end
    redis.call('ZREM', KEYS[BACKLOG], seq)
    if redis.call('HGET', KEYS[B[seq]], 'holder') == '' then
      bind(seq, me, idle, 0)
      free, got = free - 1, got + 1
    end
  end
  return got, {}
end
