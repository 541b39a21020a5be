-- wrk script for a sequence cell: run with as many threads as connections (-tN -cN), so each
-- thread drives one sequence of Conch's ``sequence_accumulator`` step after step. Every 100
-- steps the sequence ends and a new one starts (sequence_end, then sequence_start). Each answer
-- is checked against the running sum; a wrong or non-200 answer counts as an error.
--   SEQUENCE_BASE   first sequence id (a fresh one per run keeps runs apart)
local threads = {}
local counter = 0

function setup(thread)
  counter = counter + 1
  thread:set("index", counter)
  table.insert(threads, thread)
end

function init(args)
  seq = tonumber(os.getenv("SEQUENCE_BASE") or "1") + index
  step, total, wrong = 0, 0, 0
end

function request()
  local k = step % 100
  local value = (step % 7) + 1
  local body = string.format(
    '{"inputs":[{"name":"INPUT","shape":[1,1],"datatype":"INT32","data":[%d]}],' ..
    '"parameters":{"sequence_id":%d,"sequence_start":%s,"sequence_end":%s}}',
    value, seq, k == 0 and "true" or "false", k == 99 and "true" or "false")
  return wrk.format("POST", nil, {["Content-Type"] = "application/json"}, body)
end

function response(status, headers, body)
  local k = step % 100
  local value = (step % 7) + 1
  if k == 0 then total = 0 end
  total = total + value
  local got = tonumber(string.match(body or "", '"data":%[(%-?%d+)%]'))
  if status ~= 200 or got ~= total then wrong = wrong + 1 end
  step = step + 1
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
