-- Gives a reservation back exactly once. The reservation "E-k" is the k-th win of wins-stream entry
-- E (admit.lua), which holds the user and the qty; the user's items held are in their :users field,
-- which stays when it reaches 0 (it also holds the request ids' answers).
-- KEYS: meta, stock, users, released, orders
-- ARGV: reservation_id, call token, restock channel, activity id
-- Reply: 1 when this call (or an earlier attempt of it, with the same token) released, else 0.
-- Errors: UNKNOWN_ACTIVITY, LAYOUT (an activity of an earlier build's key layout: nothing
-- written), NOT_FOUND.
--
-- released maps a reservation to the token of the call that released it: HSETNX is the
-- exactly-once gate, and the token lets a transport-level retry of the winning call still learn
-- that it won (with a plain set the retry would be told 0 and no caller would see 1). A repeated
-- release writes the token again, unchanged, so that a WAIT behind it covers the first release
-- (replicas_ack).
-- A split activity's parent (its 'buckets' field) is UNKNOWN_ACTIVITY too: the caller's bucket
-- count is stale, and it looks the count up again.
local m = redis.call('HMGET', KEYS[1], 'start_ms', 'layout', 'buckets')
if not m[1] or m[3] then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
if m[2] ~= '2' then
  return redis.error_reply('LAYOUT no layout 2 in ' .. KEYS[1])
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
  -- Written again, unchanged, for replicas_ack.
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
  redis.call('HINCRBY', KEYS[1], 'buyers', -1) -- :meta buyers, raised by admit.lua
end
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
