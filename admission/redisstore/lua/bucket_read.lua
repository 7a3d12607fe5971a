-- Reads one bucket's counters in one atomic step: a transfer step moves stock_total and stock
-- together, and a read between two separate commands could see one moved and not the other
-- (a sold count off by the step's items). Read-only.
-- KEYS: bucket meta, bucket stock; and to count them too: bucket dead-letter stream
-- ARGV: none
-- Reply: {stock_total, stock, buyers, queued, dead}: stock_total and stock as stored (false when
--        the bucket is not set up), the counts 0 unless the dead-letter stream is given. buyers
--        and queued are the bucket's :meta counters 'buyers' and 'wins' (admit.lua, release.lua).
-- Errors: LAYOUT (a bucket of an earlier build's key layout).
local m = redis.call('HMGET', KEYS[1], 'stock_total', 'layout', 'wins', 'buyers')
if m[1] and m[2] ~= '2' then
  return redis.error_reply('LAYOUT no layout 2 in ' .. KEYS[1])
end
local stock = redis.call('GET', KEYS[2])
if #KEYS < 3 then
  return {m[1], stock, 0, 0, 0}
end
return {m[1], stock, tonumber(m[4] or '0'), tonumber(m[3] or '0'), redis.call('XLEN', KEYS[3])}
