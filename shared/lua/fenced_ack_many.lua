#!lua
-- fenced_ack_many: ack and delete the request entries this consumer still owns among those named and
-- count them as `fail_count`: the scheduler answering requests with an error (scheduler/queueing/error_answers.py via shared/fleet/fencing.py).
--
-- KEYS[1] statistics: keys.stats(model, version)
-- KEYS[2..] the request streams: keys.request_stream(model, version, priority)
-- ARGV[1] consumer group (keys.SCHEDULER_GROUP)
-- ARGV[2] consumer
-- ARGV[3..] per request stream, in KEYS order: how many ids, then the ids
-- Reply: how many entries were this consumer's (acked, deleted and counted).
--
-- Deleting the entries empties the request streams whose lengths enqueue.lua's direct path
-- and queue bound read. Ownership is the consumer group's pending list (the reclaimers'
-- XCLAIM moves it).
local COUNTER = 'fail_count'
--#include _ack_many.lua
