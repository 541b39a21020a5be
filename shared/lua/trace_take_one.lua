#!lua
-- trace_take_one: take one of a scope's remaining traces (gateway/extensions/trace_settings.py).
--
-- KEYS[1] traces left: keys.trace_remaining(scope)
-- Reply: 1 trace this request (one taken, or the count is not limited: no key), 0 none left.
--
-- The gateway trace API sets the counter when it sets a trace_count.
local left = tonumber(redis.call('GET', KEYS[1]) or '-1')
if left < 0 then return 1 end
if left == 0 then return 0 end
redis.call('DECR', KEYS[1])
return 1
