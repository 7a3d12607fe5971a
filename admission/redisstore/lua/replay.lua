-- Replays the stored first answer of one user's request id, as admit.lua's replay answers it, and
-- never decides: Store.Replay, which the edge asks for a keyed buy it may no longer admit (the
-- buyer's waiting-room session is over) but which may be the retry of a win. It reads only.
-- The user's :users field holds "<length of the request id>:<request id><reservation id>;" per
-- win (admit.lua's header); the reservation "E-k" is the k-th win of :orders entry E, whose
-- remaining is the entry's left less the qty of wins 1 to k, and whose qty is the k-th's.
-- KEYS: meta, users, orders
-- ARGV: user, request_id
-- Reply: {reservation_id, remaining, qty} of the win (qty as won, which the edge signs).
-- Errors: UNKNOWN_ACTIVITY (also a split activity's parent: the caller's bucket count is stale),
-- LAYOUT (an activity of an earlier build's key layout), NOT_FOUND (the request id won nothing).
local m = redis.call('HMGET', KEYS[1], 'start_ms', 'layout', 'buckets')
if not m[1] or m[3] then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
if m[2] ~= '2' then
  return redis.error_reply('LAYOUT no layout 2 in ' .. KEYS[1])
end
local v = redis.call('HGET', KEYS[2], ARGV[1])
if not v then
  return redis.error_reply('NOT_FOUND no win of this request id')
end
local sub, find, rid = string.sub, string.find, ARGV[2]
local p, n, rl = find(v, '\n', 1, true) + 1, #v, #rid
local resv
while p <= n do
  local len, q = string.match(v, '^(%d+):()', p)
  len = tonumber(len)
  local e = find(v, ';', q + len, true)
  if len == rl and sub(v, q, q + len - 1) == rid then
    resv = sub(v, q + len, e - 1)
    break
  end
  p = e + 1
end
if not resv then
  return redis.error_reply('NOT_FOUND no win of this request id')
end
local e, k = string.match(resv, '^(%d+%-%d+)%-(%d+)$')
local f = redis.call('XRANGE', KEYS[3], e, e)[1][2]
local r, q = tonumber(f[4]), 0
for j = 1, tonumber(k) do
  q = tonumber(string.match(f[4 + 2 * j], '^%d+'))
  r = r - q
end
return {resv, r, q}
