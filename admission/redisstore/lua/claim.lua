-- Claims entries idle for at least min_idle_ms and delivers them with their delivery counts,
-- atomically, up to count wins not yet acknowledged. As in read_new.lua, entries (several wins)
-- are claimed one at a time and the last may carry the claim past count; an entry comes with its
-- acknowledged win numbers (ack.lua), which the caller leaves out.
-- KEYS: meta, orders, acked
-- ARGV: group, consumer, min_idle_ms, count (wins)
-- Reply: {{id, deliveries, {field, value, ...}, acked}, ...}.
-- Errors: UNKNOWN_ACTIVITY, LAYOUT (an activity of an earlier build's key layout), NOGROUP.
-- A split activity's parent (its 'buckets' field) is UNKNOWN_ACTIVITY too: the caller's bucket
-- count is stale, and it looks the count up again.
local m = redis.call('HMGET', KEYS[1], 'start_ms', 'buckets', 'layout')
if not m[1] or m[2] then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
if m[3] ~= '2' then
  return redis.error_reply('LAYOUT no layout 2 in ' .. KEYS[1])
end
local want = tonumber(ARGV[4])
local out, got = {}, 0
local cursor = '0-0'
-- XAUTOCLAIM scans up to ten times its COUNT of the pending list per call. The scan is bounded
-- to eight times count calls of COUNT 1 (80 * count entries), so that idle entries behind busy
-- ones are found without holding the server for long.
local budget = 8 * want
while got < want and budget > 0 do
  budget = budget - 1
  local r = redis.call('XAUTOCLAIM', KEYS[2], ARGV[1], ARGV[2], ARGV[3], cursor, 'COUNT', 1)
  for _, e in ipairs(r[2]) do
    local f = e and e[2]
    if f then
      local p = redis.call('XPENDING', KEYS[2], ARGV[1], e[1], e[1], 1)
      local d = p[1] and p[1][4] or 1
      local a = redis.call('HGET', KEYS[3], e[1] .. ' ' .. ARGV[1]) or ''
      out[#out + 1] = {e[1], d, f, a}
      local acked = 0
      if a ~= '' then acked = select(2, string.gsub(a, ',', ',')) - 1 end
      got = got + (#f - 4) / 2 - acked
    end
  end
  cursor = r[1]
  if cursor == '0-0' then
    break
  end
end
return out
