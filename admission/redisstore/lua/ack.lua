-- Acknowledges wins (an entry of the wins stream holds the wins of one admission call, and win k of
-- entry E is "E-k"). The group's acknowledged win numbers of a pending entry are kept in :acked,
-- field "<entry> <group>", as ",k1,k2,...,"; once every win of the entry is in it the entry is
-- XACKed and the field deleted. The group's count of acknowledged wins, field "n <group>", rises by
-- the wins newly acknowledged (Backlog is :meta's wins less it). A win of an entry that is not
-- pending in the group (never delivered, already done, or unknown), or acknowledged before, is left
-- alone, as XACK leaves an id it does not know: acknowledging twice is harmless and counts once. So
-- is acknowledging wins of an activity that does not exist.
-- KEYS: meta, orders, acked
-- ARGV: group, then entry id and win number pairs
-- Reply: the wins newly acknowledged.
-- Errors: LAYOUT (an activity of an earlier build's key layout: nothing written).
local m = redis.call('HMGET', KEYS[1], 'start_ms', 'layout')
if m[1] and m[2] ~= '2' then
  return redis.error_reply('LAYOUT no layout 2 in ' .. KEYS[1])
end
local group = ARGV[1]
local order, wins = {}, {}
for i = 2, #ARGV, 2 do
  local e = ARGV[i]
  if not wins[e] then
    wins[e] = {}
    order[#order + 1] = e
  end
  local w = wins[e]
  w[#w + 1] = ARGV[i + 1]
end
local total = 0
for _, e in ipairs(order) do
  local x = redis.call('XRANGE', KEYS[2], e, e)[1]
  local f = x and x[2]
  -- A pending entry only: XPENDING of a missing group errors, which acknowledges nothing, as XACK.
  local p = f and f[3] == 'left' and redis.pcall('XPENDING', KEYS[2], group, e, e, 1)
  if type(p) == 'table' and not p.err and #p > 0 then
    local n = (#f - 4) / 2
    local field = e .. ' ' .. group
    local v = redis.call('HGET', KEYS[3], field) or ','
    local added = 0
    for _, k in ipairs(wins[e]) do
      local kn = tonumber(k)
      if kn and kn >= 1 and kn <= n and not string.find(v, ',' .. k .. ',', 1, true) then
        v = v .. k .. ','
        added = added + 1
      end
    end
    if added > 0 then
      total = total + added
      if select(2, string.gsub(v, ',', ',')) - 1 == n then
        redis.call('XACK', KEYS[2], group, e)
        redis.call('HDEL', KEYS[3], field)
      else
        redis.call('HSET', KEYS[3], field, v)
      end
    end
  end
end
if total > 0 then
  redis.call('HINCRBY', KEYS[3], 'n ' .. group, total)
end
return total
