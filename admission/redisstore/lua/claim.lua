-- Claims entries idle for at least min_idle_ms and delivers them with their delivery counts,
-- atomically, up to count wins not yet acknowledged. As in read_new.lua, layout-2 entries
-- (several wins) are claimed one at a time and the last may carry the claim past count; a
-- layout-2 entry comes with its acknowledged win numbers (ack_v2.lua), which the caller leaves
-- out.
-- KEYS: meta, orders, acked
-- ARGV: group, consumer, min_idle_ms, count (wins)
-- Reply: {{id, deliveries, {field, value, ...}, acked}, ...}. Errors: UNKNOWN_ACTIVITY, NOGROUP.
-- A split activity's parent (its 'buckets' field) is UNKNOWN_ACTIVITY too: the caller's bucket
-- count is stale, and it looks the count up again.
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], 'buckets') == 1 then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
local want = tonumber(ARGV[4])
local out, got = {}, 0
local cursor = '0-0'
-- The stream's first entry tells its layout (an activity keeps one for its life), so that a
-- layout-1 claim asks for all it wants at once and a layout-2 one for an entry at a time.
local first = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 1)[1]
local layout2 = first ~= nil and first[2][3] == 'left'
-- XAUTOCLAIM scans up to ten times its COUNT of the pending list per call. The scan is bounded
-- to eight calls' worth of COUNT count (80 * count entries), so that idle entries behind busy
-- ones are found without holding the server for long, whether the calls claim count or one.
local budget = 8 * want
while got < want and budget > 0 do
  local step = want - got
  if layout2 then step = 1 end
  budget = budget - step
  local r = redis.call('XAUTOCLAIM', KEYS[2], ARGV[1], ARGV[2], ARGV[3], cursor, 'COUNT', step)
  for _, e in ipairs(r[2]) do
    local f = e and e[2]
    if f then
      local p = redis.call('XPENDING', KEYS[2], ARGV[1], e[1], e[1], 1)
      local d = p[1] and p[1][4] or 1
      if f[3] == 'left' then
        local a = redis.call('HGET', KEYS[3], e[1] .. ' ' .. ARGV[1]) or ''
        out[#out + 1] = {e[1], d, f, a}
        local acked = 0
        if a ~= '' then acked = select(2, string.gsub(a, ',', ',')) - 1 end
        got = got + (#f - 4) / 2 - acked
      else
        out[#out + 1] = {e[1], d, f, ''}
        got = got + 1
      end
    end
  end
  cursor = r[1]
  if cursor == '0-0' then
    break
  end
end
return out
