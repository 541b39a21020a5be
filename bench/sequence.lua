-- wrk script for a sequence cell: one thread, N connections (-t1 -cN), N sequences of Conch's
-- ``sequence_accumulator``. Each request carries its sequence's index as its request "id"; a
-- sequence is sent its next step only once the answer to its last one is back (any connection
-- takes any idle sequence), so every sequence goes step by step, N of them at once. Every 100
-- steps a sequence ends and starts again (sequence_end, then sequence_start). Each answer is
-- checked against the running sum; a wrong or non-200 answer counts as an error.
--   SEQUENCES       N (the number of connections)
--   SEQUENCE_BASE   first sequence id (a fresh one per cell keeps cells apart)
-- One thread: wrk 4.1's latency figures from several threads running a response() script did
-- not add up (a mean longer than Little's law allows); with one they agree with the gateway.

function init(args)
  local count = tonumber(os.getenv("SEQUENCES") or "1")
  base = tonumber(os.getenv("SEQUENCE_BASE") or "1")
  idle, steps, totals, flying = {}, {}, {}, {}
  for i = 1, count do
    idle[#idle + 1] = i
    steps[i], totals[i] = 0, 0
  end
  wrong = 0
end

function request()
  local i = table.remove(idle, 1)
  if i == nil then  -- cannot happen with as many sequences as connections
    i = 1
  end
  flying[#flying + 1] = i
  local step = steps[i]
  local k = step % 100
  local body = string.format(
    '{"id":"%d","inputs":[{"name":"INPUT","shape":[1,1],"datatype":"INT32","data":[%d]}],' ..
    '"parameters":{"sequence_id":%d,"sequence_start":%s,"sequence_end":%s}}',
    i, (step % 7) + 1, base + i, k == 0 and "true" or "false", k == 99 and "true" or "false")
  return wrk.format("POST", nil, {["Content-Type"] = "application/json"}, body)
end

local function field(body, key, close)
  -- plain finds: with a Lua pattern here, wrk's latency figures came out impossible
  local _, from = string.find(body, key, 1, true)
  if not from then return nil end
  local to = string.find(body, close, from + 1, true)
  if not to then return nil end
  return string.sub(body, from + 1, to - 1)
end

function response(status, headers, body)
  body = body or ""
  local i = tonumber(field(body, '"id":"', '"'))
  for index, flying_i in ipairs(flying) do
    if flying_i == i or (i == nil and index == 1) then
      i = flying_i
      table.remove(flying, index)
      break
    end
  end
  if i == nil then return end
  local step = steps[i]
  if step % 100 == 0 then totals[i] = 0 end
  totals[i] = totals[i] + (step % 7) + 1
  if status ~= 200 or tonumber(field(body, '"data":[', "]")) ~= totals[i] then
    wrong = wrong + 1
  end
  steps[i] = step + 1
  idle[#idle + 1] = i
end

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function done(summary, latency, requests)
  local e = summary.errors
  local seconds = summary.duration / 1e6
  local ok = summary.requests - e.status
  local bad = 0
  for _, thread in ipairs(threads) do bad = bad + (thread:get("wrong") or 0) end
  local function ms(p) return latency:percentile(p) / 1000 end
  io.write(string.format(
    'WRKJSON {"requests":%d,"ok":%d,"seconds":%.3f,"rps":%.1f,' ..
    '"p50_ms":%.3f,"p90_ms":%.3f,"p99_ms":%.3f,"mean_ms":%.3f,"max_ms":%.3f,' ..
    '"errors":%d,"wrong_answers":%d}\n',
    summary.requests, ok, seconds, ok / seconds,
    ms(50), ms(90), ms(99), latency.mean / 1000, latency.max / 1000,
    e.connect + e.read + e.write + e.status + e.timeout + bad, bad))
end
