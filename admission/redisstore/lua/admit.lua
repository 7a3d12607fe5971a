-- Takes the admission decisions for a batch of requests to one activity, one after the other, each
-- exactly as if it ran alone: for every request every check runs before its first write (Lua has
-- no rollback), and a later request sees what an earlier one wrote. A batch of one is the plain
-- case; larger batches let the server pay the round trip, the script call, the activity's
-- definition, the clock and the stock read once for many buyers (see RedisStore's group admission).
-- A win is the user's latest result record; from the user's second reservation on, it is also
-- kept per reservation, as set_result.lua describes.
-- KEYS: meta, stock, buyers, req, orders, resv, results
-- ARGV: user, qty, request_id, then the same three for each further request
-- A call with a win also makes sure the four hashes it writes are hash tables (the end of the file).
-- Reply: four elements per request, in order: {outcome, remaining, reservation_id, replayed};
-- outcome as Go's Outcome (1 won, 2 sold_out, 3 limit_reached, 4 not_started, 5 ended), or 0 when
-- qty is above the per-user limit (bad input: nothing written). Refusals write nothing; a win
-- writes it, and a replay writes its stored answer again.
-- Errors (for the whole batch): UNKNOWN_ACTIVITY, LAYOUT (the activity has a 'layout' field: it is
-- admit_v2.lua's; nothing written), BAD_INPUT (malformed ARGV).
local m = redis.call('HMGET', KEYS[1], 'limit', 'start_ms', 'end_ms', 'layout')
if not m[1] then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
if m[4] then
  -- A layout-2 activity (admit_v2.lua): writing this layout into it would miss its wins.
  return redis.error_reply('LAYOUT the activity is layout ' .. m[4])
end
if #ARGV == 0 or #ARGV % 3 ~= 0 then
  return redis.error_reply('BAD_INPUT want user, qty, request id triples')
end
local limit = tonumber(m[1])
local max_reservations = 32 -- admission.MaxResultReservations

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- The window is the same for the whole batch: one script runs at one instant.
local closed = 0
if now < tonumber(m[2]) then
  closed = 4
elseif now >= tonumber(m[3]) then
  closed = 5
end
local left = tonumber(redis.call('GET', KEYS[2]))

-- record_win stores the queued record of user's new reservation id.
local function record_win(user, id)
  local rec = '{"code":"queued","reservation_id":"' .. id .. '"}'
  local lk = user .. '\0'
  local v = redis.call('HMGET', KEYS[7], lk, user)
  local list = v[1]
  if not list and v[2] then
    local ok, t = pcall(cjson.decode, v[2])
    if ok and type(t) == 'table' and type(t.reservation_id) == 'string' and t.reservation_id ~= '' then
      redis.call('HSET', KEYS[7], lk .. t.reservation_id, v[2])
      list = t.reservation_id
    end
  end
  if list then
    list = list .. ' ' .. id
    local c = 0
    for _ in string.gmatch(list, '%S+') do c = c + 1 end
    while c > max_reservations do
      local first, rest = string.match(list, '^(%S+) (.*)$')
      redis.call('HDEL', KEYS[7], lk .. first)
      list, c = rest, c - 1
    end
    redis.call('HSET', KEYS[7], lk, list, lk .. id, rec)
  end
  redis.call('HSET', KEYS[7], user, rec)
end

local out, n = {}, 0
local won = false
local function answer(outcome, remaining, resv, replayed)
  out[n + 1], out[n + 2], out[n + 3], out[n + 4] = outcome, remaining, resv, replayed
  n = n + 4
end

for i = 1, #ARGV, 3 do
  local user, qty = ARGV[i], tonumber(ARGV[i + 1])
  -- Request ids are scoped by user so that one user cannot replay another's answer.
  local rk = user .. '\0' .. ARGV[i + 2]
  local first = redis.call('HGET', KEYS[4], rk)
  if first then
    -- Written again, unchanged: a replay then writes, so a WAIT behind it (replicas_ack) covers
    -- the first write too, which may not have reached the replicas when it was answered.
    redis.call('HSET', KEYS[4], rk, first)
    local was, resv = string.match(first, '^(%-?%d+):(.*)$')
    answer(1, tonumber(was), resv, 1)
  elseif closed ~= 0 then
    answer(closed, left, '', 0)
  elseif qty > limit then
    answer(0, left, '', 0)
  else
    local held = tonumber(redis.call('HGET', KEYS[3], user) or '0')
    if held + qty > limit then
      answer(3, left, '', 0)
    elseif left < qty then
      answer(2, left, '', 0)
    else
      left = redis.call('DECRBY', KEYS[2], qty)
      redis.call('HINCRBY', KEYS[3], user, qty)
      local id = redis.call('XADD', KEYS[5], '*', 'user', user, 'qty', ARGV[i + 1], 'req', ARGV[i + 2], 'at', now)
      redis.call('HSET', KEYS[6], id, ARGV[i + 1] .. ':' .. user)
      -- %d: plain concatenation would print a large stock as 1.1258999068426e+15.
      redis.call('HSET', KEYS[4], rk, string.format('%d', left) .. ':' .. id)
      record_win(user, id)
      won = true
      answer(1, left, id, 0)
    end
  end
end

-- Redis keeps a hash of up to hash-max-listpack-entries fields (512 by default) as a listpack,
-- which every HGET and HSET searches from the start: the first hundreds of wins of an activity
-- cost several times a later one, and so does every refusal and poll of a sale of fewer items
-- (docs/admission.md, "Small hashes"). A field longer than hash-max-listpack-value turns a hash
-- into a hash table for good; it is deleted at once, so nobody sees it. The first win creates the
-- four hashes together, so :buyers (recreated after its last holder released) stands for them all.
if won then
  local enc = redis.call('OBJECT', 'ENCODING', KEYS[3])
  if enc == 'listpack' or enc == 'ziplist' then
    -- A NUL-led field: user ids have no NUL byte, and every other field starts with a user id or
    -- is a stream id, so it cannot be anyone's.
    local pad = string.rep('\0', 8193)
    for _, k in ipairs({KEYS[3], KEYS[4], KEYS[6], KEYS[7]}) do
      redis.call('HSET', k, pad, '')
      redis.call('HDEL', k, pad)
    end
  end
end
return out
