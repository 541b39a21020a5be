#!lua
-- add_stats: every statistics counter of one batch in one command (shared/fleet/publish.py).
--
-- KEYS[1] statistics: keys.stats(model, version)
-- ARGV[1] last_inference (ms)
-- ARGV[2..] counter name and amount pairs
-- Reply: none (nil).
--
-- The gateways' statistics extension reads the hash; fenced_ack.lua and the ensemble and
-- sequence scripts add to the same hash.
for i = 2, #ARGV, 2 do redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('HSET', KEYS[1], 'last_inference', ARGV[1])
