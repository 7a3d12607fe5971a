-- Delivers new entries to a consumer, up to count wins, atomically. An entry carries the wins of
-- one admission call (admit.lua) and is never split between consumers, so the entries are taken one
-- at a time until count wins are reached: the last may carry the read past count by fewer wins
-- than it holds.
-- KEYS: meta, orders
-- ARGV: group, consumer, count (wins)
-- Reply: {{id, 1, {field, value, ...}, ''}, ...}; when nothing was delivered, {top}: the id of
-- the stream's last entry ('0-0' for none), from which a blocking XREAD waits for the next.
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
local out, got = {}, 0
while got < want do
  local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', 1, 'STREAMS', KEYS[2], '>')
  if not r then
    break
  end
  for _, e in ipairs(r[1][2]) do
    local f = e[2]
    out[#out + 1] = {e[1], 1, f, ''}
    got = got + (#f - 4) / 2
  end
end
if #out == 0 then
  local top = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)[1]
  return {top and top[1] or '0-0'}
end
return out
