-- Fragment (included by fenced_ack_many.lua and cancel_ack.lua, which set COUNTER first): ack
-- and delete the entries this consumer still owns among those named, add their number to the
-- statistics field COUNTER and return it.
local owned = {}
local at = 3
for k = 2, #KEYS do
  local n = tonumber(ARGV[at])
  for i = at + 1, at + n do
    if #redis.call('XPENDING', KEYS[k], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2]) > 0 then
      owned[#owned + 1] = {k, ARGV[i]}
    end
  end
  at = at + n + 1
end
if #owned == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], COUNTER, #owned)
for _, entry in ipairs(owned) do
  redis.call('XACK', KEYS[entry[1]], ARGV[1], entry[2])
  redis.call('XDEL', KEYS[entry[1]], entry[2])
end
return #owned
