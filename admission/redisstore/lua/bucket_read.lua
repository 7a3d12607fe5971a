-- Reads one bucket's counters in one atomic step: a transfer step moves stock_total and stock
-- together, and a read between two separate commands could see one moved and not the other
-- (a sold count off by the step's items). Read-only.
-- KEYS: bucket meta, bucket stock; and to count them too: bucket buyers, bucket wins stream,
--       bucket dead-letter stream
-- ARGV: none
-- Reply: {stock_total, stock, buyers, queued, dead}: stock_total and stock as stored (false when
--        the bucket is not set up), the counts 0 unless their keys are given. A layout-2 bucket
--        (admit_v2.lua) answers buyers and queued from its meta counters 'buyers' and 'wins' (its
--        :users keeps users who hold nothing, and a stream entry carries all of one call's wins).
local m = redis.call('HMGET', KEYS[1], 'stock_total', 'layout', 'wins', 'buyers')
local total = m[1]
local stock = redis.call('GET', KEYS[2])
if #KEYS < 5 then
  return {total, stock, 0, 0, 0}
end
if m[2] == '2' then
  return {total, stock, tonumber(m[4] or '0'), tonumber(m[3] or '0'), redis.call('XLEN', KEYS[5])}
end
return {total, stock, redis.call('HLEN', KEYS[3]), redis.call('XLEN', KEYS[4]), redis.call('XLEN', KEYS[5])}
