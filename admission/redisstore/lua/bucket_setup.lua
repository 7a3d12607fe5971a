-- Creates one bucket of a split activity with its initial share of the stock, or updates an
-- existing bucket's definition without touching its stock (transfers have moved it).
-- KEYS: bucket meta, bucket stock
-- ARGV: share, limit, start_ms, end_ms, pay_ms, salt, layout (the parent's, '' for layout 1:
--       written only into a bucket this call creates), gen (the parent's; likewise)
-- Reply: 1 when created, 0 when updated.
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'stock_total', ARGV[1], 'limit', ARGV[2], 'start_ms', ARGV[3],
    'end_ms', ARGV[4], 'pay_ms', ARGV[5], 'salt', ARGV[6])
  if ARGV[7] ~= '' then
    redis.call('HSET', KEYS[1], 'layout', ARGV[7])
  end
  if ARGV[8] ~= '' then
    redis.call('HSET', KEYS[1], 'gen', ARGV[8])
  end
  redis.call('SET', KEYS[2], ARGV[1])
  return 1
end
redis.call('HSET', KEYS[1], 'limit', ARGV[2], 'start_ms', ARGV[3], 'end_ms', ARGV[4],
  'pay_ms', ARGV[5], 'salt', ARGV[6])
return 0
