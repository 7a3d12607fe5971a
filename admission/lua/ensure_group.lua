-- Creates the wins queue's consumer group at the start of the stream, unless it exists.
-- KEYS: meta, orders
-- ARGV: group
-- Errors: UNKNOWN_ACTIVITY (checked first so that no stray stream is created).
if redis.call('EXISTS', KEYS[1]) == 0 then
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
