-- Creates the wins queue's consumer group at the start of the stream, unless it exists.
-- KEYS: meta, orders
-- ARGV: group
-- Errors: UNKNOWN_ACTIVITY (checked first so that no stray stream is created).
-- A split activity's parent (its 'buckets' field) is UNKNOWN_ACTIVITY too: the caller's bucket
-- count is stale, and it looks the count up again.
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], 'buckets') == 1 then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
local r = redis.pcall('XGROUP', 'CREATE', KEYS[2], ARGV[1], '0', 'MKSTREAM')
if type(r) == 'table' and r.err then
  if string.sub(r.err, 1, 9) == 'BUSYGROUP' then
    return 0
  end
  return redis.error_reply(r.err)
end
return 1
