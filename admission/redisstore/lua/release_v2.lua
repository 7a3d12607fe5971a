-- Gives a reservation of a layout-2 activity (admit_v2.lua) back exactly once, as release.lua does;
-- the reservation "E-k" is the k-th win of stream entry E, which holds the user and the qty (there
-- is no :resv), and the user's items held are in their :users field (which stays when it reaches
-- 0: it also holds the request ids' answers). The prototype testdata/wonlayout/release.lua with
-- the layout check.
-- KEYS: meta, stock, users, released, orders
-- ARGV: reservation_id, call token, restock channel, activity id
-- Reply: 1 when this call (or an earlier attempt of it, with the same token) released, else 0.
-- Errors: UNKNOWN_ACTIVITY, LAYOUT (not a layout-2 activity: nothing written), NOT_FOUND.
-- A split activity's parent (its 'buckets' field) is UNKNOWN_ACTIVITY too: the caller's bucket
-- count is stale, and it looks the count up again.
local m = redis.call('HMGET', KEYS[1], 'start_ms', 'layout', 'buckets')
if not m[1] or m[3] then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
if m[2] ~= '2' then
  return redis.error_reply('LAYOUT the activity is not layout 2')
end
local e, k = string.match(ARGV[1], '^(%d+%-%d+)%-(%d+)$')
local f
if e then
  k = tonumber(k)
  local r = redis.call('XRANGE', KEYS[5], e, e)[1]
  f = r and r[2]
end
if not f or k < 1 or #f < 4 + 2 * k then
  return redis.error_reply('NOT_FOUND no such reservation')
end
if redis.call('HSETNX', KEYS[4], ARGV[1], ARGV[2]) == 0 then
  -- Written again, unchanged: as release.lua, for replicas_ack.
  local token = redis.call('HGET', KEYS[4], ARGV[1])
  redis.call('HSET', KEYS[4], ARGV[1], token)
  if token == ARGV[2] then
    return 1
  end
  return 0
end

local user = f[3 + 2 * k]
local qty = tonumber(string.match(f[4 + 2 * k], '^%d+'))
redis.call('INCRBY', KEYS[2], qty)
local v = redis.call('HGET', KEYS[3], user)
local held, rest = string.match(v, '^(%d+)(.*)$')
local now_held = tonumber(held) - qty
redis.call('HSET', KEYS[3], user, string.format('%d', now_held) .. rest)
if now_held == 0 then
  redis.call('HINCRBY', KEYS[1], 'buyers', -1) -- :meta buyers, raised by admit_v2.lua
end
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
