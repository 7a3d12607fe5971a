-- Re-delivers a consumer's own pending entries with their delivery counts, atomically (a
-- consumer's history read counts as a delivery), up to count wins not yet acknowledged. As in
-- read_new.lua, entries are read one at a time and the last may carry the read past count. An
-- entry comes with the win numbers ack.lua recorded as acknowledged, which the caller leaves out.
-- KEYS: meta, orders, acked
-- ARGV: group, consumer, count (wins)
-- Reply: {{id, deliveries, {field, value, ...}, acked}, ...}, acked as in ack.lua ('' for none).
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
local want = tonumber(ARGV[3])
local out, got, last = {}, 0, '0'
while got < want do
  local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', 1, 'STREAMS', KEYS[2], last)
  if not r or #r[1][2] == 0 then
    break
  end
  for _, e in ipairs(r[1][2]) do
    last = e[1]
    local f = e[2]
    if f then -- an entry deleted from the stream comes back without fields
      local p = redis.call('XPENDING', KEYS[2], ARGV[1], e[1], e[1], 1)
      local d = p[1] and p[1][4] or 1
      local a = redis.call('HGET', KEYS[3], e[1] .. ' ' .. ARGV[1]) or ''
      out[#out + 1] = {e[1], d, f, a}
      local acked = 0
      if a ~= '' then acked = select(2, string.gsub(a, ',', ',')) - 1 end
      got = got + (#f - 4) / 2 - acked
    end
  end
end
return out
