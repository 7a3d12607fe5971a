-- Counts the wins a consumer group has not acknowledged: never delivered, plus delivered and
-- pending. Layout 1 (one win per entry): the group's lag plus its pending count, from XINFO
-- GROUPS. Layout 2 (:meta has layout 2, or a wins count): :meta's wins, the wins ever appended,
-- less the group's acknowledged wins, which ack_v2.lua and dead_letter_v2.lua count.
-- KEYS: meta, orders, acked
-- ARGV: group
-- Reply: the backlog. Errors: UNKNOWN_ACTIVITY, NOGROUP, LAG (Redis does not know the lag).
-- A split activity's parent (its 'buckets' field) is UNKNOWN_ACTIVITY too: the caller's bucket
-- count is stale, and it looks the count up again.
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], 'buckets') == 1 then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
local gs = redis.pcall('XINFO', 'GROUPS', KEYS[2])
if gs.err then -- no stream yet: no group either
  return redis.error_reply('NOGROUP no such consumer group')
end
for _, g in ipairs(gs) do
  local info = {}
  for i = 1, #g, 2 do
    info[g[i]] = g[i + 1]
  end
  if info['name'] == ARGV[1] then
    local m = redis.call('HMGET', KEYS[1], 'layout', 'wins')
    if m[1] == '2' or m[2] then
      local acked = redis.call('HGET', KEYS[3], 'n ' .. ARGV[1])
      return (tonumber(m[2]) or 0) - (tonumber(acked) or 0)
    end
    if not info['lag'] then
      return redis.error_reply('LAG redis does not know the group\'s lag')
    end
    return info['lag'] + info['pending']
  end
end
return redis.error_reply('NOGROUP no such consumer group')
