-- Records a stock transfer's intent in a split activity's parent (step 1 of a transfer,
-- bucket_transfer.go), with the parent's gen, which the later steps check: a transfer is
-- tied to one definition of the activity. Only into a defined parent, so that a transfer begun
-- before a delete leaves no stray intents for the next definition.
-- KEYS: parent meta, parent intents
-- ARGV: transfer id, from, to, qty, ms
-- Reply: the parent's gen ('' for a parent defined before gens).
-- Errors: UNKNOWN_ACTIVITY (no split parent).
local m = redis.call('HMGET', KEYS[1], 'buckets', 'gen')
if not m[1] then
  return redis.error_reply('UNKNOWN_ACTIVITY no such split activity')
end
local gen = m[2] or ''
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. ARGV[4] .. ' ' .. ARGV[5] .. ' ' .. gen)
return gen
