#!lua
-- good
-- KEYS[1] statistics: keys.stats(model, version)
-- KEYS[2..] request streams: keys.request_stream(model, version, priority)
-- ARGV[1] a field
-- Reply: the value.
local stats = KEYS[1]
local function get(key, field) return redis.call('HGET', key, field) end
for i = 2, #KEYS do redis.call('XLEN', KEYS[i]) end
return get(stats, ARGV[1])
