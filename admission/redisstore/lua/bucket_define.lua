-- Creates or redefines a split activity's parent (the definition, under the activity's own hash
-- tag; the buckets are set up by bucket_setup.lua). Every check runs before the first write. The
-- parent has no 'limit' or 'stock_total' field, so admit.lua never takes it for an activity of
-- its own, and define.lua refuses it (its 'buckets' field). A parent is created with 'layout' 2,
-- as define.lua creates an activity, and so is each bucket (bucket_setup.lua); an existing parent
-- without it is an earlier build's, which this one does not serve.
-- KEYS: parent meta, parent intents (hash transfer id -> "from to qty ms gen")
-- ARGV: stock_total, limit, start_ms, end_ms, pay_ms, salt ('' keeps the stored one), new_salt,
--       force ('1' redefines an activity whose window has opened), buckets, raise id (the
--       transfer id prefix of stock added by a raise), gen (a random name of this definition,
--       written only into a parent this call creates)
-- Reply: {state, stock_total, limit, start_ms, end_ms, pay_ms, salt, gen}: gen the parent's (''
--        for a parent defined before gens), which every bucket and transfer carries, so that a
--        transfer begun before a delete never moves stock into the next definition's buckets;
--        state 'new', 'same', 'updated' (a raise is recorded as one intent per bucket, from -1) or
--        'shrink' (the total is lowered by the caller, by taking unsold stock from the buckets).
-- Errors: BUCKETS (defined without buckets, or with another count), RUNNING, LAYOUT (an activity
-- of an earlier build's key layout: nothing written).
local meta, intents = KEYS[1], KEYS[2]
local total, salt, n = ARGV[1], ARGV[6], ARGV[9]
if redis.call('HEXISTS', meta, 'stock_total') == 1 then
  return redis.error_reply('BUCKETS defined without buckets: delete the activity first')
end
local old = redis.call('HMGET', meta, 'total', 'user_limit', 'start_ms', 'end_ms', 'pay_ms', 'salt', 'buckets', 'layout', 'gen')
local gen = old[9] or ''
if not old[1] then
  if salt == '' then salt = ARGV[7] end
  redis.call('HSET', meta, 'total', total, 'user_limit', ARGV[2], 'start_ms', ARGV[3],
    'end_ms', ARGV[4], 'pay_ms', ARGV[5], 'salt', salt, 'buckets', n, 'gen', ARGV[11], 'layout', '2')
  return {'new', total, ARGV[2], ARGV[3], ARGV[4], ARGV[5], salt, ARGV[11]}
end
if old[8] ~= '2' then
  return redis.error_reply('LAYOUT no layout 2 in ' .. meta)
end
if old[7] ~= n then
  return redis.error_reply('BUCKETS defined with ' .. old[7] .. ' buckets, not ' .. n .. ': delete the activity first')
end
if salt == '' then salt = old[6] end
if old[1] == total and old[2] == ARGV[2] and old[3] == ARGV[3] and old[4] == ARGV[4] and
    old[5] == ARGV[5] and old[6] == salt then
  return {'same', old[1], old[2], old[3], old[4], old[5], old[6], gen}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[8] ~= '1' and now >= tonumber(old[3]) then
  return redis.error_reply('RUNNING the window has opened')
end
local old_total, new_total = tonumber(old[1]), tonumber(total)
local state = 'updated'
if new_total > old_total then
  -- The raise is spread over the buckets as transfers from outside (-1): the total counts it
  -- now, and the caller (or a recovery) gives it to the buckets.
  local d, nb = new_total - old_total, tonumber(n)
  for i = 0, nb - 1 do
    local q = math.floor(d / nb)
    if i < d % nb then q = q + 1 end
    if q > 0 then
      redis.call('HSET', intents, ARGV[10] .. '-' .. i, '-1 ' .. i .. ' ' .. q .. ' ' .. now .. ' ' .. gen)
    end
  end
elseif new_total < old_total then
  state, total = 'shrink', old[1]
end
redis.call('HSET', meta, 'total', total, 'user_limit', ARGV[2], 'start_ms', ARGV[3],
  'end_ms', ARGV[4], 'pay_ms', ARGV[5], 'salt', salt)
return {state, total, ARGV[2], ARGV[3], ARGV[4], ARGV[5], salt, gen}
