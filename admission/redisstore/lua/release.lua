-- Gives a reservation back exactly once.
-- KEYS: meta, stock, buyers, released, resv
-- ARGV: reservation_id, call token, restock channel, activity id
-- Reply: 1 when this call (or an earlier attempt of it, with the same token) released, else 0.
-- Errors: UNKNOWN_ACTIVITY, LAYOUT (a layout-2 activity, whose script is the _v2
-- one: nothing written), NOT_FOUND.
--
-- released maps a reservation to the token of the call that released it: HSETNX is the
-- exactly-once gate, and the token lets a transport-level retry of the winning call still learn
-- that it won (with a plain set the retry would be told 0 and no caller would see 1).
-- A split activity's parent (its 'buckets' field) is UNKNOWN_ACTIVITY too: the caller's bucket
-- count is stale, and it looks the count up again.
local m = redis.call('HMGET', KEYS[1], 'start_ms', 'layout', 'buckets')
if not m[1] or m[3] then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
if m[2] then
  return redis.error_reply('LAYOUT the activity is layout ' .. m[2])
end
local v = redis.call('HGET', KEYS[5], ARGV[1])
if not v then
  return redis.error_reply('NOT_FOUND no such reservation')
end
if redis.call('HSETNX', KEYS[4], ARGV[1], ARGV[2]) == 0 then
  -- Written again, unchanged: a repeated release then writes, so a WAIT behind it (replicas_ack)
  -- covers the first release too.
  local token = redis.call('HGET', KEYS[4], ARGV[1])
  redis.call('HSET', KEYS[4], ARGV[1], token)
  if token == ARGV[2] then
    return 1
  end
  return 0
end

local qty, user = string.match(v, '^(%d+):(.*)$')
qty = tonumber(qty)
redis.call('INCRBY', KEYS[2], qty)
if redis.call('HINCRBY', KEYS[3], user, -qty) <= 0 then
  redis.call('HDEL', KEYS[3], user)
end
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
