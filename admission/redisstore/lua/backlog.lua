-- Counts the wins a consumer group has not acknowledged: never delivered, plus delivered and
-- pending. That is :meta's wins, the wins ever appended (admit.lua), less the group's acknowledged
-- wins, which ack.lua and dead_letter.lua count.
-- KEYS: meta, orders, acked
-- ARGV: group
-- Reply: the backlog.
-- Errors: UNKNOWN_ACTIVITY, LAYOUT (an activity of an earlier build's key layout), NOGROUP.
-- A split activity's parent (its 'buckets' field) is UNKNOWN_ACTIVITY too: the caller's bucket
-- count is stale, and it looks the count up again.
local m = redis.call('HMGET', KEYS[1], 'start_ms', 'buckets', 'layout', 'wins')
if not m[1] or m[2] then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
if m[3] ~= '2' then
  return redis.error_reply('LAYOUT no layout 2 in ' .. KEYS[1])
end
local gs = redis.pcall('XINFO', 'GROUPS', KEYS[2])
if gs.err then -- no stream yet: no group either
  return redis.error_reply('NOGROUP no such consumer group')
end
for _, g in ipairs(gs) do
  for i = 1, #g, 2 do
    if g[i] == 'name' and g[i + 1] == ARGV[1] then
      local acked = redis.call('HGET', KEYS[3], 'n ' .. ARGV[1])
      return (tonumber(m[4]) or 0) - (tonumber(acked) or 0)
    end
  end
end
return redis.error_reply('NOGROUP no such consumer group')
