-- PROTOTYPE (issue 15, docs/admission.md "A one-field-per-user layout"): lua/release.lua for the
-- layout of admit.lua beside this file, used by no store. Gives a reservation back exactly once,
-- as lua/release.lua does; the reservation "E-k" is the k-th win of stream entry E, which holds
-- the user and the qty (there is no :resv), and the user's items held are in their :users field
-- (which stays when it reaches 0: it also holds the request ids' answers).
-- KEYS: meta, stock, users, released, orders
-- ARGV: reservation_id, call token, restock channel, activity id
-- Reply: 1 when this call (or an earlier attempt of it, with the same token) released, else 0.
-- Errors: UNKNOWN_ACTIVITY, NOT_FOUND.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
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
  -- Written again, unchanged: as lua/release.lua, for replicas_ack.
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
redis.call('HSET', KEYS[3], user, string.format('%d', tonumber(held) - qty) .. rest)
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
