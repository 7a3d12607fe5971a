-- Creates one bucket of a split activity with its initial share of the stock, or updates an
-- existing bucket's definition without touching its stock (transfers have moved it). A bucket is
-- created with 'layout' 2, as define.lua creates an activity.
-- KEYS: bucket meta, bucket stock
-- ARGV: share, limit, start_ms, end_ms, pay_ms, salt, gen (the parent's: written only into a
--       bucket this call creates)
-- Reply: 1 when created, 0 when updated.
-- Errors: LAYOUT (a bucket of an earlier build's key layout: nothing written).
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'stock_total', ARGV[1], 'limit', ARGV[2], 'start_ms', ARGV[3],
    'end_ms', ARGV[4], 'pay_ms', ARGV[5], 'salt', ARGV[6], 'layout', '2')
  if ARGV[7] ~= '' then
    redis.call('HSET', KEYS[1], 'gen', ARGV[7])
  end
  redis.call('SET', KEYS[2], ARGV[1])
  return 1
end
if redis.call('HGET', KEYS[1], 'layout') ~= '2' then
  return redis.error_reply('LAYOUT no layout 2 in ' .. KEYS[1])
end
redis.call('HSET', KEYS[1], 'limit', ARGV[2], 'start_ms', ARGV[3], 'end_ms', ARGV[4],
  'pay_ms', ARGV[5], 'salt', ARGV[6])
return 0
