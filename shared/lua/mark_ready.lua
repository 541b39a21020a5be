#!lua
-- mark_ready: a worker's readiness mark for one (model, version) (shared/fleet/readiness.py), announced
-- on the change feed when it makes the version ready where it was not.
--
-- KEYS[1] readiness set: keys.ready(model, version)
-- ARGV[1] worker id
-- ARGV[2] heartbeat expiry (ms)
-- ARGV[3] now (ms)
-- ARGV[4] change feed channel, keys.changes_channel() (a channel, not a key)
-- ARGV[5] the change feed's topic
-- Reply: 0.
--
-- Read by enqueue.lua and sequence_admit.lua (is some worker live?), sequence_adopt.lua (is a
-- holder dead?), the gateways' model table and the schedulers.
local old = redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
if (not old) or tonumber(old) < tonumber(ARGV[3]) then
  redis.call('PUBLISH', ARGV[4], ARGV[5])
end
return 0
