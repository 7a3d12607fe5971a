-- Claims entries idle for at least min_idle_ms and delivers them with their delivery counts,
-- atomically.
-- KEYS: meta, orders
-- ARGV: group, consumer, min_idle_ms, count
-- Reply: {{id, deliveries, {field, value, ...}}, ...}. Errors: UNKNOWN_ACTIVITY, NOGROUP.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
local want = tonumber(ARGV[4])
local out = {}
local cursor = '0-0'
-- XAUTOCLAIM scans a bounded slice of the pending list per call; a few rounds find idle entries
-- behind busy ones without holding the server for long.
for _ = 1, 8 do
  local r = redis.call('XAUTOCLAIM', KEYS[2], ARGV[1], ARGV[2], ARGV[3], cursor, 'COUNT', want - #out)
  for _, e in ipairs(r[2]) do
    if e and e[2] then
      local p = redis.call('XPENDING', KEYS[2], ARGV[1], e[1], e[1], 1)
      out[#out + 1] = {e[1], p[1] and p[1][4] or 1, e[2]}
    end
  end
  cursor = r[1]
  if cursor == '0-0' or #out >= want then
    break
  end
end
return out
