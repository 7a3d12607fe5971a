-- Creates or redefines an activity. Every check runs before the first write: Lua has no rollback.
-- An activity is created with 'layout' 2 in its :meta, the key layout of admit.lua and the scripts
-- beside it; an existing one without it is an earlier build's, which this one does not serve.
-- KEYS: meta, stock
-- ARGV: stock_total, limit, start_ms, end_ms, pay_ms, salt ('' keeps the stored one), new_salt
--       (taken when creating with an empty salt), force ('1' redefines an activity whose window
--       has opened), restock channel, activity id (published when the total rises, so that nodes
--       that flagged the activity sold out look again at once)
-- Reply: {stock_total, limit, start_ms, end_ms, pay_ms, salt} as stored.
-- Errors: RUNNING, BELOW_SOLD, BUCKETS (the id is a split activity's parent: bucket_define.lua),
-- LAYOUT (an activity of an earlier build's key layout: nothing written).
local meta, stock = KEYS[1], KEYS[2]
local total, salt = ARGV[1], ARGV[6]
local old = redis.call('HMGET', meta, 'stock_total', 'limit', 'start_ms', 'end_ms', 'pay_ms', 'salt', 'buckets', 'layout')
if old[7] then
  return redis.error_reply('BUCKETS defined with ' .. old[7] .. ' buckets, not 1: delete the activity first')
end

if not old[1] then
  if salt == '' then salt = ARGV[7] end
  redis.call('HSET', meta, 'stock_total', total, 'limit', ARGV[2], 'start_ms', ARGV[3],
    'end_ms', ARGV[4], 'pay_ms', ARGV[5], 'salt', salt, 'layout', '2')
  redis.call('SET', stock, total)
  return {total, ARGV[2], ARGV[3], ARGV[4], ARGV[5], salt}
end
if old[8] ~= '2' then
  return redis.error_reply('LAYOUT no layout 2 in ' .. meta)
end

if salt == '' then salt = old[6] end
if old[1] == total and old[2] == ARGV[2] and old[3] == ARGV[3] and old[4] == ARGV[4] and
    old[5] == ARGV[5] and old[6] == salt then
  return {old[1], old[2], old[3], old[4], old[5], old[6]}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[8] ~= '1' and now >= tonumber(old[3]) then
  return redis.error_reply('RUNNING the window has opened')
end

local old_total, new_total = tonumber(old[1]), tonumber(total)
local left = tonumber(redis.call('GET', stock) or old[1])
if new_total < old_total - left then
  return redis.error_reply('BELOW_SOLD new total below items sold')
end

if new_total ~= old_total then
  redis.call('INCRBY', stock, new_total - old_total)
end
redis.call('HSET', meta, 'stock_total', total, 'limit', ARGV[2], 'start_ms', ARGV[3],
  'end_ms', ARGV[4], 'pay_ms', ARGV[5], 'salt', salt)
if new_total > old_total then
  redis.call('PUBLISH', ARGV[9], ARGV[10])
end
return {total, ARGV[2], ARGV[3], ARGV[4], ARGV[5], salt}
