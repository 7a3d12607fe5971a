-- Moves a pending entry to the dead-letter stream and acknowledges it, in one step. An entry that
-- is no longer pending in the group (acknowledged, or already dead-lettered) is left alone.
-- KEYS: meta, orders, dead
-- ARGV: group, entry id, reason
-- Reply: 1 moved, 0 not pending. Errors: UNKNOWN_ACTIVITY, NOT_FOUND, NOGROUP.
-- A split activity's parent (its 'buckets' field) is UNKNOWN_ACTIVITY too: the caller's bucket
-- count is stale, and it looks the count up again.
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], 'buckets') == 1 then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
local e = redis.call('XRANGE', KEYS[2], ARGV[2], ARGV[2])
if #e == 0 then
  return redis.error_reply('NOT_FOUND no such entry')
end
local p = redis.call('XPENDING', KEYS[2], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 0 then
  return 0
end

redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
local f = e[1][2]
f[#f + 1] = 'id'
f[#f + 1] = ARGV[2]
f[#f + 1] = 'deliveries'
f[#f + 1] = p[1][4]
f[#f + 1] = 'reason'
f[#f + 1] = ARGV[3]
redis.call('XADD', KEYS[3], '*', unpack(f))
return 1
