#!lua
-- dead_letter: move a poison entry to the model's dead-letter stream (shared/fleet/dead_letters.py),
-- only while this consumer still owns it: copy its fields with the reason, ack and delete it.
--
-- KEYS[1] dead-letter stream: keys.dead_letters(model)
-- KEYS[2] the entry's stream: keys.request_stream(model, version, p) or keys.batch_stream(...)
-- KEYS[3] statistics: keys.stats(model, version)
-- ARGV[1] consumer group
-- ARGV[2] consumer
-- ARGV[3] entry id
-- ARGV[4] reason
-- ARGV[5] dead-letter stream's approximate max length
-- ARGV[6] failures to count as `fail_count` (0: none)
-- ARGV[7] batch-done channel, keys.batch_done_channel(model, version) ('' for none; a channel)
-- Reply: 1 when moved, 0 when the entry was not this consumer's (another owns it, or gone).
--
-- The dead-letter stream is read by operators only. Deleting the entry empties the streams
-- whose lengths enqueue.lua reads.
if #redis.call('XPENDING', KEYS[2], ARGV[1], ARGV[3], ARGV[3], 1, ARGV[2]) == 0 then
  return 0
end
local fields = {'reason', ARGV[4], 'stream', KEYS[2], 'entry', ARGV[3], 'consumer', ARGV[2]}
local rows = redis.call('XRANGE', KEYS[2], ARGV[3], ARGV[3])
if #rows > 0 then
  for _, value in ipairs(rows[1][2]) do fields[#fields + 1] = value end
end
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[5], '*', unpack(fields))
if tonumber(ARGV[6]) > 0 then redis.call('HINCRBY', KEYS[3], 'fail_count', ARGV[6]) end
redis.call('XACK', KEYS[2], ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[2], ARGV[3])
if ARGV[7] ~= '' then redis.call('PUBLISH', ARGV[7], '') end
return 1
