#!lua
-- fenced_ack: ack, delete, count and announce one stream entry, only while this consumer
-- still owns it (shared/fleet/fencing.py; the workers' ack of a batch).
--
-- KEYS[1] the entry's stream: keys.batch_stream(model, version) (or keys.request_stream(...))
-- KEYS[2] statistics: keys.stats(model, version)
-- ARGV[1] consumer group
-- ARGV[2] consumer
-- ARGV[3] entry id
-- ARGV[4] batch-done channel, keys.batch_done_channel(model, version) ('' for none; a channel)
-- ARGV[5] last_inference (ms)
-- ARGV[6] the batch's size, kept as `last_batch` (0: not recorded)
-- ARGV[7..] counter name and amount pairs
-- Reply: 1 when the entry was this consumer's (acked, deleted, counted, announced), 0 if not.
--
-- Writes what others read: `last_batch`, read by enqueue.lua (the direct path is taken only
-- while executions are batches of one); deleting the batch entry empties the batch stream that
-- enqueue.lua's direct path and the schedulers' backlog read. Ownership is the consumer
-- group's pending list, which the reclaimers' XCLAIM moves.
if #redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1, ARGV[2]) == 0 then
  return 0
end
if #ARGV > 6 then
  for i = 7, #ARGV, 2 do redis.call('HINCRBY', KEYS[2], ARGV[i], ARGV[i + 1]) end
  redis.call('HSET', KEYS[2], 'last_inference', ARGV[5])
end
if ARGV[6] ~= '0' then redis.call('HSET', KEYS[2], 'last_batch', ARGV[6]) end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[1], ARGV[3])
if ARGV[4] ~= '' then redis.call('PUBLISH', ARGV[4], '') end
return 1
