-- Re-delivers a consumer's own pending entries with their delivery counts, atomically (a
-- consumer's history read counts as a delivery).
-- KEYS: meta, orders
-- ARGV: group, consumer, count
-- Reply: {{id, deliveries, {field, value, ...}}, ...}. Errors: UNKNOWN_ACTIVITY, NOGROUP.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3], 'STREAMS', KEYS[2], '0')
local out = {}
if not r then
  return out
end
for _, e in ipairs(r[1][2]) do
  if e[2] then -- an entry deleted from the stream comes back without fields
    local p = redis.call('XPENDING', KEYS[2], ARGV[1], e[1], e[1], 1)
    out[#out + 1] = {e[1], p[1] and p[1][4] or 1, e[2]}
  end
end
return out
