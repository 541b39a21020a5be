#!lua
-- dispatch: send one batch (scheduler/queueing/dispatch.py): all or nothing, add the batch to the batch
-- stream and ack and delete its request entries, only when every one is still pending for
-- this scheduler.
--
-- KEYS[1] batch stream: keys.batch_stream(model, version)
-- KEYS[2..] the request streams the batch takes from: keys.request_stream(model, version, p)
-- ARGV[1] consumer group (keys.SCHEDULER_GROUP)
-- ARGV[2] consumer
-- ARGV[3] the batch (envelope)
-- ARGV[4..] per request stream, in KEYS order: how many ids, then the ids (in stream order)
-- Reply: {batch stream length} when sent; else {-1, index, id, ...} naming the entries that are
-- not this consumer's (index 1 is KEYS[2]); nothing is written then.
--
-- Ownership is read with one XPENDING over a stream's range from the first id to the last; an
-- id that range did not list is asked about alone. Writes what others read: the batch entry
-- (read by the workers, acked by fenced_ack.lua); deleting the request entries empties the
-- streams whose lengths enqueue.lua reads (direct path, queue bound).
local missing = {-1}
local at = 4
for k = 2, #KEYS do
  local n = tonumber(ARGV[at])
  local listed = {}
  if n > 1 then
    local rows = redis.call('XPENDING', KEYS[k], ARGV[1], ARGV[at + 1], ARGV[at + n], n, ARGV[2])
    for _, row in ipairs(rows) do listed[row[1]] = true end
  end
  for i = at + 1, at + n do
    if not listed[ARGV[i]]
        and #redis.call('XPENDING', KEYS[k], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2]) == 0 then
      missing[#missing + 1] = k - 1
      missing[#missing + 1] = ARGV[i]
    end
  end
  at = at + n + 1
end
if #missing > 1 then return missing end
redis.call('XADD', KEYS[1], '*', 'd', ARGV[3])
at = 4
for k = 2, #KEYS do
  local n = tonumber(ARGV[at])
  redis.call('XACK', KEYS[k], ARGV[1], unpack(ARGV, at + 1, at + n))
  redis.call('XDEL', KEYS[k], unpack(ARGV, at + 1, at + n))
  at = at + n + 1
end
return {redis.call('XLEN', KEYS[1])}
