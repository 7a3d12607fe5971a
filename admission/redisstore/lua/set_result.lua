-- Stores a result record of one of a user's reservations, only for an activity that exists (no
-- stray keys). The results hash holds, per user: <user>, the latest record (a poll's top-level
-- fields); and once the user has had two reservations, <user>\0, their ids oldest first separated
-- by spaces, and <user>\0<id>, the record of each (admission.Result.Reservations). The record
-- becomes the latest unless the latest is another reservation still in flight (queued or
-- pending_payment). The same folding as the memory store's foldResult.
-- KEYS: meta, results
-- ARGV: user, result JSON, its reservation id ('' for none), the most ids kept
-- Errors: UNKNOWN_ACTIVITY, LAYOUT (a layout-2 activity, whose script is the _v2
-- one: nothing written).
-- A split activity's parent (its 'buckets' field) is UNKNOWN_ACTIVITY too: the caller's bucket
-- count is stale, and it looks the count up again.
local m = redis.call('HMGET', KEYS[1], 'start_ms', 'layout', 'buckets')
if not m[1] or m[3] then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
if m[2] then
  return redis.error_reply('LAYOUT the activity is layout ' .. m[2])
end
local user, rec, resv, max = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local lk = user .. '\0'
local v = redis.call('HMGET', KEYS[2], user, lk)
local top, list = v[1], v[2]
local top_id, top_code = '', ''
if top then
  local ok, t = pcall(cjson.decode, top)
  if ok and type(t) == 'table' then
    if type(t.reservation_id) == 'string' then top_id = t.reservation_id end
    if type(t.code) == 'string' then top_code = t.code end
  end
end

if resv ~= '' then
  if not list and top_id ~= '' and top_id ~= resv then
    redis.call('HSET', KEYS[2], lk .. top_id, top)
    list = top_id
  end
  if list then
    if not string.find(' ' .. list .. ' ', ' ' .. resv .. ' ', 1, true) then
      list = list .. ' ' .. resv
      local n = 0
      for _ in string.gmatch(list, '%S+') do n = n + 1 end
      while n > max do
        local first, rest = string.match(list, '^(%S+) (.*)$')
        redis.call('HDEL', KEYS[2], lk .. first)
        list, n = rest, n - 1
      end
      redis.call('HSET', KEYS[2], lk, list)
    end
    redis.call('HSET', KEYS[2], lk .. resv, rec)
  end
end
if top_id == '' or top_id == resv or (top_code ~= 'queued' and top_code ~= 'pending_payment') then
  redis.call('HSET', KEYS[2], user, rec)
end
return 1
