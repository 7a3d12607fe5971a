-- Deletes an activity and every key it owns.
-- KEYS: meta, then every other key of the activity
-- ARGV: force ('1' deletes while the window is open)
-- Reply: the number of keys deleted.
-- Errors: UNKNOWN_ACTIVITY, RUNNING, LAYOUT (an activity of an earlier build's key layout, whose
-- keys this build does not know: nothing deleted).
local m = redis.call('HMGET', KEYS[1], 'start_ms', 'end_ms', 'layout')
if not m[1] then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
if m[3] ~= '2' then
  return redis.error_reply('LAYOUT no layout 2 in ' .. KEYS[1])
end
if ARGV[1] ~= '1' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if now >= tonumber(m[1]) and now < tonumber(m[2]) then
    return redis.error_reply('RUNNING the window has opened')
  end
end
return redis.call('DEL', unpack(KEYS))
