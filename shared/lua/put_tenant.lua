#!lua
-- put_tenant: create or replace a tenant and its API keys (gateway/admin/store.py), refusing a
-- key that belongs to another tenant.
--
-- KEYS[1] tenants: keys.tenants()
-- KEYS[2] API key digests -> tenant: keys.api_keys()
-- KEYS[3] the tenant's key digests: keys.tenant_keys(tenant)
-- KEYS[4] tenants' revision: keys.tenants_rev()
-- ARGV[1] tenant name
-- ARGV[2] tenant record (JSON)
-- ARGV[3..] the tenant's API key digests (sha256 hex)
-- Reply: {} when written; {digest, owner} when a key belongs to another tenant (nothing done).
--
-- The gateways' tenant table reads all four (reloading when the revision moves);
-- delete_tenant.lua writes the same keys.
for i = 3, #ARGV do
  local owner = redis.call('HGET', KEYS[2], ARGV[i])
  if owner and owner ~= ARGV[1] then return {ARGV[i], owner} end
end
for _, digest in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  redis.call('HDEL', KEYS[2], digest)
end
redis.call('DEL', KEYS[3])
for i = 3, #ARGV do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[1])
  redis.call('SADD', KEYS[3], ARGV[i])
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('INCR', KEYS[4])
return {}
