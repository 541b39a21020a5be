-- Fragment (after _sequence_lib.lua): take backlogged sequences into this instance's free
-- slots, oldest first.
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
