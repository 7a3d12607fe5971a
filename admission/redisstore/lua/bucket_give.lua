-- The destination side of a stock transfer: adds the items taken by the transfer to a bucket,
-- once per transfer id, and announces the parent activity on the restock channel.
-- KEYS: bucket meta, bucket stock, bucket transfer log (hash transfer id -> qty)
-- ARGV: transfer id, qty taken, restock channel, parent activity id, gen (the transfer's
--       definition: another one's bucket refuses, so stock taken from a deleted definition's
--       bucket never reaches the next one's)
-- Reply: 1 when this call gave, 0 when the transfer had given before.
-- Errors: UNKNOWN_ACTIVITY.
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then
  return 0
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return redis.error_reply('UNKNOWN_ACTIVITY no such bucket')
end
if (redis.call('HGET', KEYS[1], 'gen') or '') ~= ARGV[5] then
  return redis.error_reply('UNKNOWN_ACTIVITY the bucket belongs to another definition')
end
local q = tonumber(ARGV[2])
if q > 0 then
  redis.call('INCRBY', KEYS[2], q)
  redis.call('HINCRBY', KEYS[1], 'stock_total', q)
  redis.call('PUBLISH', ARGV[3], ARGV[4])
end
redis.call('HSET', KEYS[3], ARGV[1], q)
return 1
