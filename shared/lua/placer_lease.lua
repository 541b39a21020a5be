#!lua
-- placer_lease: renew or release the on_demand placer's lease, only by its holder
-- (scheduler/placement/lease.py; taken with SET NX PX, outside this script).
--
-- KEYS[1] the lease: keys.placer_lease()
-- ARGV[1] the holder's id (the scheduler's)
-- ARGV[2] the lease's new time to live in ms; 0 releases it
-- Reply: 1 renewed (or released), 0 not held by ARGV[1] (expired or taken by another).
--
-- A compare and set: a scheduler whose lease expired while it stalled must not extend (or
-- delete) the lease another scheduler took since.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local ttl = tonumber(ARGV[2])
if ttl <= 0 then
  redis.call('DEL', KEYS[1])
else
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return 1
