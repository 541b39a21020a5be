#!lua
-- bad: a deliberately bad script.
--
-- KEYS[1] statistics: keys.stats(model, version)
-- ARGV[1] a value
-- Reply: 1.
local prefix = ARGV[1]
local copy = KEYS[1] .. ':copy'
local stats = KEYS[1]
local function touch(key) return redis.call('GET', key) end
redis.call('SET', KEYS[1] .. ':other', ARGV[1])
redis.call('SET', copy, ARGV[2])
redis.call('GET', 'conch:literal')
redis.call('HGET', prefix, 'x')
redis.call('DEL', stats, prefix .. 'x')
redis.call('HSET', stats, 'n', 1)
touch(stats)
touch(prefix)
redis.call('PUBLISH', ARGV[1], '')
return redis.call('HGET', KEYS[#KEYS], 'n')
