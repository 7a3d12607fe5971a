-- The source side of a stock transfer: takes up to qty unsold items out of a bucket, once per
-- transfer id. stock_total and stock move together, so the bucket's sold count is unchanged.
-- KEYS: bucket meta, bucket stock, bucket transfer log (hash transfer id -> qty)
-- ARGV: transfer id, qty wanted, gen (the transfer's definition: another one's bucket refuses)
-- Reply: the items taken by this transfer (0 to qty): the logged number when it ran before.
-- Errors: UNKNOWN_ACTIVITY.
local done = redis.call('HGET', KEYS[3], ARGV[1])
if done then
  return tonumber(done)
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return redis.error_reply('UNKNOWN_ACTIVITY no such bucket')
end
if (redis.call('HGET', KEYS[1], 'gen') or '') ~= ARGV[3] then
  return redis.error_reply('UNKNOWN_ACTIVITY the bucket belongs to another definition')
end
local left = tonumber(redis.call('GET', KEYS[2]) or '0')
local q = math.min(tonumber(ARGV[2]), left)
if q < 0 then q = 0 end
if q > 0 then
  redis.call('DECRBY', KEYS[2], q)
  redis.call('HINCRBY', KEYS[1], 'stock_total', -q)
end
redis.call('HSET', KEYS[3], ARGV[1], q)
return q
