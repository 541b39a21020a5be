#!lua
-- delete_tenant: remove a tenant and its API keys (gateway/admin/store.py).
--
-- KEYS[1] tenants: keys.tenants()
-- KEYS[2] API key digests -> tenant: keys.api_keys()
-- KEYS[3] the tenant's key digests: keys.tenant_keys(tenant)
-- KEYS[4] tenants' revision: keys.tenants_rev()
-- ARGV[1] tenant name
-- Reply: 1 when deleted, 0 when the tenant is unknown.
--
-- Undoes what put_tenant.lua writes; the gateways' tenant table follows the revision.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
for _, digest in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  redis.call('HDEL', KEYS[2], digest)
end
redis.call('DEL', KEYS[3])
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('INCR', KEYS[4])
return 1
