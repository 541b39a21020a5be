#!lua
-- ensemble_finish: for many requests at once, delete each state and ack + delete its request
-- entry, only if the state still exists; add the finished ones' statistics
-- (scheduler/ensemble/scripts.py).
--
-- KEYS[1] the ensemble's statistics: keys.stats(model, version)
-- KEYS[2..] per request: its state, keys.ensemble_state(model, version, request_id), then its
--           request stream, keys.request_stream(model, version, priority)
-- ARGV[1] consumer group (keys.SCHEDULER_GROUP)
-- ARGV[2] last_inference (ms)
-- ARGV[3..] per request: entry id, then one value per counter of NAMES (COUNTERS in
--           scheduler/ensemble/scripts.py, same order)
-- Reply: per request 1 (finished here) or 0 (already finished by another scheduler).
--
-- The states are written by ensemble_start.lua and ensemble_step.lua; deleting the request
-- entries empties the streams whose lengths enqueue.lua reads.
local NAMES = {'success_count', 'fail_count', 'inference_count', 'execution_count',
  'compute_infer_ns'}
local n = #NAMES
local sums, out, any = {}, {}, false
for j = 1, n do sums[j] = 0 end
for i = 1, (#KEYS - 1) / 2 do
  local base = 3 + (i - 1) * (n + 1)
  if redis.call('DEL', KEYS[2 * i]) == 1 then
    redis.call('XACK', KEYS[2 * i + 1], ARGV[1], ARGV[base])
    redis.call('XDEL', KEYS[2 * i + 1], ARGV[base])
    for j = 1, n do sums[j] = sums[j] + tonumber(ARGV[base + j]) end
    out[i], any = 1, true
  else
    out[i] = 0
  end
end
if any then
  for j = 1, n do
    if sums[j] ~= 0 then
      redis.call('HINCRBY', KEYS[1], NAMES[j], string.format('%.0f', sums[j]))
    end
  end
  redis.call('HSET', KEYS[1], 'last_inference', ARGV[2])
end
return out
