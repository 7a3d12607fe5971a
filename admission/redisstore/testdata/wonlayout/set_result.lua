-- PROTOTYPE (issue 15, docs/admission.md "A one-field-per-user layout"): lua/set_result.lua for
-- the layout of admit.lua beside this file, used by no store. That admit.lua writes no "queued"
-- record; this script first writes the ones of the user's wins it has not written yet (folded in
-- the user's :users field), exactly as lua/admit.lua's record_win would have at each win, so that
-- :results is then what lua/admit.lua would have left, and folds the new record as
-- lua/set_result.lua does (the rest of this file is that script). A poll reads :results and the
-- :users field and derives the records of the wins not folded yet the same way.
-- KEYS: meta, results, users
-- ARGV: user, result JSON, its reservation id ('' for none), the most ids kept
-- Errors: UNKNOWN_ACTIVITY.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
local user, rec, resv, max = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local lk = user .. '\0'

-- record_win is lua/admit.lua's: the queued record of user's reservation id.
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
