#!lua
-- ensemble_start: create an ensemble request's state unless it exists
-- (scheduler/ensemble/scripts.py).
--
-- KEYS[1] the request's state: keys.ensemble_state(model, version, request_id)
-- ARGV[1] request payload
-- ARGV[2] entry reference
-- ARGV[3] milliseconds to keep the state
-- ARGV[4..] field/value pairs: the children `c:<step>` submitted with the request
-- Reply: 1 when created; the whole state (HGETALL) when it existed (nothing written).
--
-- ensemble_step.lua adds to the state, ensemble_finish.lua deletes it.
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'req', ARGV[1], 'entry', ARGV[2], unpack(ARGV, 4))
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
return redis.call('HGETALL', KEYS[1])
