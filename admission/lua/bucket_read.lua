-- Reads one bucket's counters in one atomic step: a transfer step moves stock_total and stock
-- together, and a read between two separate commands could see one moved and not the other
-- (a sold count off by the step's items). Read-only.
-- KEYS: bucket meta, bucket stock; and to count them too: bucket buyers, bucket wins stream,
--       bucket dead-letter stream
-- ARGV: none
-- Reply: {stock_total, stock, buyers, queued, dead}: stock_total and stock as stored (false when
--        the bucket is not set up), the counts 0 unless their keys are given.
local total = redis.call('HGET', KEYS[1], 'stock_total')
local stock = redis.call('GET', KEYS[2])
if #KEYS < 5 then
  return {total, stock, 0, 0, 0}
end
return {total, stock, redis.call('HLEN', KEYS[3]), redis.call('XLEN', KEYS[4]), redis.call('XLEN', KEYS[5])}
