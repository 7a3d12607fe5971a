-- Stores a result record of one of a user's reservations, only for an activity that exists (no
-- stray keys). The results hash holds, per user: <user>, the latest record (a poll's top-level
-- fields); and once the user has had two reservations, <user>\0, their ids oldest first separated
-- by spaces, and <user>\0<id>, the record of each (admission.Result.Reservations). The record
-- becomes the latest unless the latest is another reservation still in flight (queued or
-- pending_payment). The same folding as the memory store's foldResult.
-- admit.lua writes no "queued" record at a win: this script first writes the ones of the user's
-- wins it has not written yet (past folded in the user's :users field), in win order, each as it
-- would have been written at its win (record_win), and then folds the new record. A poll reads
-- :results and the :users field and derives the records of the wins not folded yet the same way
-- (results.go, foldWins).
-- KEYS: meta, results, users
-- ARGV: user, result JSON, its reservation id ('' for none), the most ids kept
-- Reply: 1.
-- Errors: UNKNOWN_ACTIVITY, LAYOUT (an activity of an earlier build's key layout: nothing
-- written).
-- A split activity's parent (its 'buckets' field) is UNKNOWN_ACTIVITY too: the caller's bucket
-- count is stale, and it looks the count up again.
local m = redis.call('HMGET', KEYS[1], 'start_ms', 'layout', 'buckets')
if not m[1] or m[3] then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
if m[2] ~= '2' then
  return redis.error_reply('LAYOUT no layout 2 in ' .. KEYS[1])
end
local user, rec, resv, max = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local lk = user .. '\0'

-- record_win writes the queued record of user's win id, as a record of it written at the win would
-- have been folded.
local function record_win(id)
  local rec = '{"code":"queued","reservation_id":"' .. id .. '"}'
  local v = redis.call('HMGET', KEYS[2], lk, user)
  local list = v[1]
  if not list and v[2] then
    local ok, t = pcall(cjson.decode, v[2])
    if ok and type(t) == 'table' and type(t.reservation_id) == 'string' and t.reservation_id ~= '' then
      redis.call('HSET', KEYS[2], lk .. t.reservation_id, v[2])
      list = t.reservation_id
    end
  end
  if list then
    list = list .. ' ' .. id
    local c = 0
    for _ in string.gmatch(list, '%S+') do c = c + 1 end
    while c > max do
      local first, rest = string.match(list, '^(%S+) (.*)$')
      redis.call('HDEL', KEYS[2], lk .. first)
      list, c = rest, c - 1
    end
    redis.call('HSET', KEYS[2], lk, list, lk .. id, rec)
  end
  redis.call('HSET', KEYS[2], user, rec)
end

local u = redis.call('HGET', KEYS[3], user)
if u then
  local held, folded, p = string.match(u, '^(%d+) (%d+)\n()')
  folded = tonumber(folded)
  local c = 0
  while p <= #u do
    local len, q = string.match(u, '^(%d+):()', p)
    local e = string.find(u, ';', q + tonumber(len), true)
    c = c + 1
    if c > folded then
      record_win(string.sub(u, q + tonumber(len), e - 1))
    end
    p = e + 1
  end
  if c > folded then
    redis.call('HSET', KEYS[3], user, held .. ' ' .. c .. '\n' .. string.sub(u, string.find(u, '\n', 1, true) + 1))
  end
end

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
