-- Delivers new entries to a consumer, up to count wins, atomically. An entry of layout 2 (its
-- second field is left: one entry per admission call, a pair per win) carries several wins and
-- is never split between consumers, so the entries are taken one at a time until count wins are
-- reached: the last may carry the read past count by fewer wins than it holds. A layout-1 entry
-- is one win, and the rest of such a stream is read in one XREADGROUP, as before this script.
-- KEYS: meta, orders
-- ARGV: group, consumer, count (wins)
-- Reply: {{id, 1, {field, value, ...}, ''}, ...}; when nothing was delivered, {top}: the id of
-- the stream's last entry ('0-0' for none), from which a blocking XREAD waits for the next.
-- Errors: UNKNOWN_ACTIVITY, NOGROUP.
-- A split activity's parent (its 'buckets' field) is UNKNOWN_ACTIVITY too: the caller's bucket
-- count is stale, and it looks the count up again.
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], 'buckets') == 1 then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
local want = tonumber(ARGV[3])
local out, got, layout2 = {}, 0, nil
while got < want do
  local step = 1
  if layout2 == false then step = want - got end
  local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', step, 'STREAMS', KEYS[2], '>')
  if not r then
    break
  end
  for _, e in ipairs(r[1][2]) do
    local f = e[2]
    if layout2 == nil then layout2 = f[3] == 'left' end
    out[#out + 1] = {e[1], 1, f, ''}
    if f[3] == 'left' then got = got + (#f - 4) / 2 else got = got + 1 end
  end
end
if #out == 0 then
  local top = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)[1]
  return {top and top[1] or '0-0'}
end
return out
