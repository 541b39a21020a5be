#!lua
-- rate_resources: Triton's rate limiter resources, counted fleet-wide with leases
-- (workers/ratelimit/gate.py). One hash per resource and scope (a device of a host, or global).
-- Holders and waiters are leased: a worker that dies or stalls stops renewing, and what it held
-- or waited for is dropped once the lease ran out (the chaos rule: nothing leaks forever).
--
-- KEYS[1..] the resources an instance needs, one slot: keys.rate_resource(name, scope)
-- ARGV[1] op: 'acquire', 'release' (holding and waiting) or 'renew' (the lease of a holder)
-- ARGV[2] token: the instance (worker id, model, version, instance number)
-- ARGV[3] now in milliseconds (0: Redis TIME)
-- ARGV[4] lease in milliseconds
-- ARGV[5] acquire: the instance's pass (its virtual time; lower runs first)
-- ARGV[6] acquire: the instance's stride (Triton's priority; 1 or more)
-- ARGV[7..] acquire: per key, in KEYS order: count needed, count available (0: the default,
-- the largest count any instance asked for, as Triton)
-- Reply: acquire: {1, next pass} when granted, else {0, pass to wait with}; release and renew:
-- the number of keys that held the token.
--
-- Fields: 'h:<token>' -> '<count> <expiry>' (holders), 'w:<token>' -> '<pass> <arrival>
-- <expiry>' (waiters), 'max' (largest count asked), 'vt' (the pass of the last grant).
-- Among waiters the lowest (pass, arrival, token) goes first: stride scheduling, so an instance
-- of priority 2 is granted half as often as one of priority 1 while both wait. Only this script
-- reads and writes these hashes.
local op, token = ARGV[1], ARGV[2]
local now = tonumber(ARGV[3])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local lease = tonumber(ARGV[4])
local hold, wait = 'h:' .. token, 'w:' .. token
local keep = math.max(lease * 10, 86400000)

if op == 'release' then
  local n = 0
  for i = 1, #KEYS do
    n = n + redis.call('HDEL', KEYS[i], hold)
    redis.call('HDEL', KEYS[i], wait)
  end
  return n
end
if op == 'renew' then
  local n = 0
  for i = 1, #KEYS do
    local held = redis.call('HGET', KEYS[i], hold)
    if held then
      local count = string.match(held, '^(%S+)')
      redis.call('HSET', KEYS[i], hold, count .. ' ' .. (now + lease))
      n = n + 1
    end
  end
  return n
end

local pass = tonumber(ARGV[5])
local stride = math.max(tonumber(ARGV[6]), 1)
local arrival = now
local fits = true
local rivals = {}
for i = 1, #KEYS do
  local need = tonumber(ARGV[5 + 2 * i])
  local given = tonumber(ARGV[6 + 2 * i])
  local fields = redis.call('HGETALL', KEYS[i])
  local used, largest = 0, need
  for j = 1, #fields, 2 do
    local f, v = fields[j], fields[j + 1]
    local kind, who = string.sub(f, 1, 2), string.sub(f, 3)
    if kind == 'h:' then
      local count, expiry = string.match(v, '^(%S+) (%S+)$')
      if tonumber(expiry) <= now then
        redis.call('HDEL', KEYS[i], f)
      elseif who ~= token then
        used = used + tonumber(count)
      end
    elseif kind == 'w:' then
      local p, a, expiry = string.match(v, '^(%S+) (%S+) (%S+)$')
      if tonumber(expiry) <= now then
        redis.call('HDEL', KEYS[i], f)
      elseif who == token then
        arrival = math.min(arrival, tonumber(a))
      else
        rivals[#rivals + 1] = {tonumber(p), tonumber(a), who}
      end
    elseif f == 'max' then
      largest = math.max(largest, tonumber(v))
    elseif f == 'vt' then
      pass = math.max(pass, tonumber(v))
    end
  end
  redis.call('HSET', KEYS[i], 'max', largest)
  local available = given
  if available <= 0 then available = largest end
  if used + need > available then fits = false end
end
if fits then
  for _, r in ipairs(rivals) do
    if r[1] < pass or (r[1] == pass and (r[2] < arrival or (r[2] == arrival and r[3] < token))) then
      fits = false
      break
    end
  end
end
for i = 1, #KEYS do
  if fits then
    local need = tonumber(ARGV[5 + 2 * i])
    redis.call('HDEL', KEYS[i], wait)
    redis.call('HSET', KEYS[i], hold, need .. ' ' .. (now + lease), 'vt', pass)
  else
    redis.call('HSET', KEYS[i], wait, pass .. ' ' .. arrival .. ' ' .. (now + lease))
  end
  redis.call('PEXPIRE', KEYS[i], keep)
end
if fits then return {1, pass + stride} end
return {0, pass}
