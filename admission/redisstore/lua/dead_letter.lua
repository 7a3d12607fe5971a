-- Moves one win to the dead-letter stream and acknowledges it (as ack.lua does), in one step. The
-- dead letter has the fields user, qty, req (the request id), at (the admission's time), id (the
-- win's id "E-k"), deliveries and reason. The entry itself stays in the wins stream: releases and
-- replays read it. A win whose entry is not pending in the group, or that was acknowledged or
-- dead-lettered before, is left alone, which makes a repeated call harmless.
-- KEYS: meta, orders, dead, acked
-- ARGV: group, entry id, win number k (a decimal without leading zeros), reason
-- Reply: 1 moved, 0 not pending.
-- Errors: UNKNOWN_ACTIVITY, LAYOUT (an activity of an earlier build's key layout), NOT_FOUND,
-- NOGROUP.
-- A split activity's parent (its 'buckets' field) is UNKNOWN_ACTIVITY too: the caller's bucket
-- count is stale, and it looks the count up again.
local m = redis.call('HMGET', KEYS[1], 'start_ms', 'buckets', 'layout')
if not m[1] or m[2] then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
if m[3] ~= '2' then
  return redis.error_reply('LAYOUT no layout 2 in ' .. KEYS[1])
end
local group, e, k = ARGV[1], ARGV[2], ARGV[3]
local x = redis.call('XRANGE', KEYS[2], e, e)[1]
local f = x and x[2]
local kn = tonumber(k)
if not f or f[3] ~= 'left' or not kn or kn < 1 or kn > (#f - 4) / 2 then
  return redis.error_reply('NOT_FOUND no such win')
end
local p = redis.call('XPENDING', KEYS[2], group, e, e, 1)
if #p == 0 then
  return 0
end
local field = e .. ' ' .. group
local v = redis.call('HGET', KEYS[4], field) or ','
if string.find(v, ',' .. k .. ',', 1, true) then
  return 0
end

local user, pair = f[3 + 2 * kn], f[4 + 2 * kn]
local sp = string.find(pair, ' ', 1, true)
redis.call('XADD', KEYS[3], '*', 'user', user, 'qty', string.sub(pair, 1, sp - 1),
  'req', string.sub(pair, sp + 1), 'at', f[2], 'id', e .. '-' .. k, 'deliveries', p[1][4], 'reason', ARGV[4])
v = v .. k .. ','
if select(2, string.gsub(v, ',', ',')) - 1 == (#f - 4) / 2 then
  redis.call('XACK', KEYS[2], group, e)
  redis.call('HDEL', KEYS[4], field)
else
  redis.call('HSET', KEYS[4], field, v)
end
redis.call('HINCRBY', KEYS[4], 'n ' .. group, 1)
return 1
