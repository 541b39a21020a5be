#!lua
-- token_bucket: take one token from every rate bucket that applies, or none
-- (gateway/core/ratelimit.py). Time is Redis's clock unless the caller gives one (tests).
--
-- KEYS[1..] the buckets, one slot: keys.rate_bucket(tenant) and keys.rate_bucket(tenant, model)
-- ARGV[1] now in microseconds (0: Redis TIME)
-- ARGV[2..] per bucket, in KEYS order: rate (tokens per second), burst
-- Reply: 0 when admitted, else the microseconds until every bucket has a token.
--
-- Only this script reads and writes the buckets (every gateway process runs it).
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local tokens, stamps = {}, {}
local wait = 0
for i = 1, #KEYS do
  local rate = tonumber(ARGV[2 * i])
  local burst = tonumber(ARGV[2 * i + 1])
  local state = redis.call('HMGET', KEYS[i], 'tokens', 'ts')
  local have, ts = tonumber(state[1]), tonumber(state[2])
  if have == nil or ts == nil then
    have, ts = burst, now
  elseif now > ts then
    have = math.min(burst, have + (now - ts) * rate / 1000000)
    ts = now
  end
  if have > burst then have = burst end
  tokens[i], stamps[i] = have, ts
  if have < 1 then
    local need = math.ceil((1 - have) * 1000000 / rate)
    if need > wait then wait = need end
  end
end
for i = 1, #KEYS do
  local rate = tonumber(ARGV[2 * i])
  local burst = tonumber(ARGV[2 * i + 1])
  local have = tokens[i]
  if wait == 0 then have = have - 1 end
  redis.call('HSET', KEYS[i], 'tokens', tostring(have), 'ts', tostring(stamps[i]))
  redis.call('PEXPIRE', KEYS[i], math.ceil(burst * 1000 / rate) + 1000)
end
return wait
