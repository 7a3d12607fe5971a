-- Checks, then deletes, a split activity's parent: the caller deletes the buckets between the two
-- calls, so that a crash never leaves buckets without the parent that lists their count.
-- KEYS: parent meta, parent intents
-- ARGV: force ('1' deletes while the window is open), mode ('check' or 'delete')
-- Reply: the number of keys deleted (mode delete), 1 (mode check).
-- Errors: UNKNOWN_ACTIVITY, RUNNING, LAYOUT (an activity of an earlier build's key layout, whose
-- keys this build does not know: nothing deleted).
local m = redis.call('HMGET', KEYS[1], 'start_ms', 'end_ms', 'buckets', 'layout')
if not m[1] or not m[3] then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
if m[4] ~= '2' then
  return redis.error_reply('LAYOUT no layout 2 in ' .. KEYS[1])
end
if ARGV[1] ~= '1' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if now >= tonumber(m[1]) and now < tonumber(m[2]) then
    return redis.error_reply('RUNNING the window has opened')
  end
end
if ARGV[2] ~= 'delete' then
  return 1
end
return redis.call('DEL', KEYS[1], KEYS[2])
