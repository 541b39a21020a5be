#!lua
-- ensemble_step: record the replies of one step-stream entry in their requests' states, and ack
-- the entry when every runner's plan stood (scheduler/ensemble/scripts.py).
--
-- KEYS[1] step stream: keys.ensemble_steps(model, version)
-- KEYS[2..] one state per reply: keys.ensemble_state(model, version, request_id)
-- ARGV[1] consumer group (keys.SCHEDULER_GROUP)
-- ARGV[2] entry id
-- ARGV[3..] per reply: step, expected state size (0: answer the state), number of tensor pairs,
--           number of child pairs, the tensor field/value pairs, the child field/value pairs
-- Reply: per reply: 0 request gone, 1 the plan stands, else the whole state (HGETALL).
--
-- The states are created by ensemble_start.lua and deleted by ensemble_finish.lua; the step
-- stream is written by the workers (the steps' replies).
local out, clean, a = {}, true, 3
for i = 2, #KEYS do
  local step, expected = ARGV[a], tonumber(ARGV[a + 1])
  local tensors, children = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local first = a + 4
  local mid = first + 2 * tensors
  a = mid + 2 * children
  if redis.call('EXISTS', KEYS[i]) == 0 then
    out[i - 1] = 0
  else
    if redis.call('HSETNX', KEYS[i], 'd:' .. step, '1') == 1 and tensors > 0 then
      redis.call('HSET', KEYS[i], unpack(ARGV, first, mid - 1))
    end
    if children > 0 then redis.call('HSET', KEYS[i], unpack(ARGV, mid, a - 1)) end
    if redis.call('HLEN', KEYS[i]) == expected then
      out[i - 1] = 1
    else
      out[i - 1] = redis.call('HGETALL', KEYS[i])
      clean = false
    end
  end
end
if clean then
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
  redis.call('XDEL', KEYS[1], ARGV[2])
end
return out
