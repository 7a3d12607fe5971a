-- Re-delivers a consumer's own pending entries with their delivery counts, atomically (a
-- consumer's history read counts as a delivery), up to count wins not yet acknowledged. As in
-- read_new.lua, a layout-2 entry (several wins) is read one at a time and the last may carry the
-- read past count; a layout-1 stream is read in one more XREADGROUP after its first entry. A
-- layout-2 entry comes with the win numbers ack_v2.lua recorded as acknowledged, which the
-- caller leaves out.
-- KEYS: meta, orders, acked
-- ARGV: group, consumer, count (wins)
-- Reply: {{id, deliveries, {field, value, ...}, acked}, ...}, acked as in ack_v2.lua ('' for none).
-- Errors: UNKNOWN_ACTIVITY, NOGROUP.
-- A split activity's parent (its 'buckets' field) is UNKNOWN_ACTIVITY too: the caller's bucket
-- count is stale, and it looks the count up again.
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], 'buckets') == 1 then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
local want = tonumber(ARGV[3])
local out, got, last, layout2 = {}, 0, '0', nil
while got < want do
  local step = 1
  if layout2 == false then step = want - got end
  local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', step, 'STREAMS', KEYS[2], last)
  if not r or #r[1][2] == 0 then
    break
  end
  for _, e in ipairs(r[1][2]) do
    last = e[1]
    local f = e[2]
    if f then -- an entry deleted from the stream comes back without fields
      if layout2 == nil then layout2 = f[3] == 'left' end
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
end
return out
