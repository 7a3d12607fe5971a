-- Takes one admission decision. Every check runs before the first write: Lua has no rollback.
-- KEYS: meta, stock, buyers, req, orders, resv, results
-- ARGV: user, qty, request_id
-- Reply: {outcome, remaining, reservation_id, replayed}; outcome as Go's Outcome (1 won, 2 sold_out,
-- 3 limit_reached, 4 not_started, 5 ended). Errors: UNKNOWN_ACTIVITY, BAD_INPUT.
local m = redis.call('HMGET', KEYS[1], 'limit', 'start_ms', 'end_ms')
if not m[1] then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end

local user, qty = ARGV[1], tonumber(ARGV[2])
-- Request ids are scoped by user so that one user cannot replay another's answer.
local rk = user .. '\0' .. ARGV[3]
local first = redis.call('HGET', KEYS[4], rk)
if first then
  local left, resv = string.match(first, '^(%-?%d+):(.*)$')
  return {1, tonumber(left), resv, 1}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now < tonumber(m[2]) then
  return {4, tonumber(redis.call('GET', KEYS[2])), '', 0}
end
if now >= tonumber(m[3]) then
  return {5, tonumber(redis.call('GET', KEYS[2])), '', 0}
end

local limit = tonumber(m[1])
if qty > limit then
  return redis.error_reply('BAD_INPUT qty above the per-user limit')
end
local held = tonumber(redis.call('HGET', KEYS[3], user) or '0')
local left = tonumber(redis.call('GET', KEYS[2]))
if held + qty > limit then
  return {3, left, '', 0}
end
if left < qty then
  return {2, left, '', 0}
end

left = redis.call('DECRBY', KEYS[2], qty)
redis.call('HINCRBY', KEYS[3], user, qty)
local id = redis.call('XADD', KEYS[5], '*', 'user', user, 'qty', ARGV[2], 'req', ARGV[3], 'at', now)
redis.call('HSET', KEYS[6], id, ARGV[2] .. ':' .. user)
-- %d: plain concatenation would print a large stock as 1.1258999068426e+15.
redis.call('HSET', KEYS[4], rk, string.format('%d', left) .. ':' .. id)
redis.call('HSET', KEYS[7], user, '{"code":"queued","reservation_id":"' .. id .. '"}')
return {1, left, id, 0}
