-- Ends a stock transfer: removes its intent from the parent, and for a transfer out of the
-- buckets (a lowered total) lowers the parent's total by the items taken, once.
-- KEYS: parent meta, parent intents
-- ARGV: transfer id, change of the parent's total (0, or minus the items taken), gen (the
--       transfer's definition)
-- Reply: 1 when this call removed the intent, 0 when it was gone (or belongs to another
-- definition of the activity, whose intents do not hold it).
if (redis.call('HGET', KEYS[1], 'gen') or '') ~= ARGV[3] then
  return 0
end
if redis.call('HDEL', KEYS[2], ARGV[1]) == 0 then
  return 0
end
local d = tonumber(ARGV[2])
if d ~= 0 then
  redis.call('HINCRBY', KEYS[1], 'total', d)
end
return 1
