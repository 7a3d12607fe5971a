-- Creates the wins queue's consumer group at the start of the stream, unless it exists.
-- KEYS: meta, orders
-- ARGV: group
-- Reply: 1 created, 0 there already.
-- Errors: UNKNOWN_ACTIVITY (checked first so that no stray stream is created), LAYOUT (an activity
-- of an earlier build's key layout: no group created).
-- A split activity's parent (its 'buckets' field) is UNKNOWN_ACTIVITY too: the caller's bucket
-- count is stale, and it looks the count up again.
local m = redis.call('HMGET', KEYS[1], 'start_ms', 'buckets', 'layout')
if not m[1] or m[2] then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
if m[3] ~= '2' then
  return redis.error_reply('LAYOUT no layout 2 in ' .. KEYS[1])
end
local r = redis.pcall('XGROUP', 'CREATE', KEYS[2], ARGV[1], '0', 'MKSTREAM')
if type(r) == 'table' and r.err then
  if string.sub(r.err, 1, 9) == 'BUSYGROUP' then
    return 0
  end
  return redis.error_reply(r.err)
end
return 1
