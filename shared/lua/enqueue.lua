#!lua
-- enqueue: the gateway's atomic admission of one request (shared/fleet/admission_script.py).
-- Is some worker of the version alive, is there room, was this request queued already? When
-- the direct path is asked for and every stream of the version is empty, the request goes to
-- the batch stream as a batch of one instead.
--
-- KEYS[1] readiness set: keys.ready(model, version)
-- KEYS[2] request stream: keys.request_stream(model, version, priority)
-- KEYS[3] admission record: keys.admitted(model, request_id)
-- KEYS[4] batch stream (direct path only): keys.batch_stream(model, version)
-- KEYS[5] statistics (direct path only): keys.stats(model, version)
-- KEYS[6..] every request stream of the version (direct path only): keys.request_stream(...)
-- ARGV[1] oldest readiness expiry (ms) that still counts as live
-- ARGV[2] max queue size (0: none)
-- ARGV[3] request header (envelope)
-- ARGV[4] request payload (envelope)
-- ARGV[5] milliseconds to keep the admission record (the request's deadline)
-- Reply: 1 queued (or already queued), 2 queued direct, -1 no live worker, -2 queue full.
--
-- Reads what others write: the readiness set (mark_ready.lua, every worker's heartbeat); the
-- streams' lengths, which depend on dispatch.lua deleting the request entries it takes and on
-- fenced_ack.lua deleting the batch entries it acks; `last_batch` in the statistics, written
-- by fenced_ack.lua. Writes: request entries (read by the schedulers), direct batch entries
-- (read by the workers, acked by fenced_ack.lua), the admission record (read only here).
if redis.call('EXISTS', KEYS[3]) == 1 then return 1 end
if redis.call('ZCOUNT', KEYS[1], ARGV[1], '+inf') == 0 then return -1 end
if #KEYS > 3 and redis.call('XLEN', KEYS[4]) == 0
    and tonumber(redis.call('HGET', KEYS[5], 'last_batch') or '1') <= 1 then
  local idle = true
  for i = 6, #KEYS do
    if redis.call('XLEN', KEYS[i]) > 0 then idle = false break end
  end
  if idle then
    redis.call('XADD', KEYS[4], '*', 'h', ARGV[3], 'r', ARGV[4])
    redis.call('SET', KEYS[3], '1', 'PX', ARGV[5])
    return 2
  end
end
local max_queue = tonumber(ARGV[2])
if max_queue > 0 and redis.call('XLEN', KEYS[2]) >= max_queue then return -2 end
redis.call('XADD', KEYS[2], '*', 'h', ARGV[3], 'd', ARGV[4])
redis.call('SET', KEYS[3], '1', 'PX', ARGV[5])
return 1
