-- Takes the admission decisions for a batch of requests to one activity, one after the other, each
-- exactly as if it ran alone: a request is decided on what the requests before it left (a user's
-- two requests count against the limit together; a request id repeated in the batch replays the
-- first answer), and a refusal or bad input writes nothing. A batch of one is the plain case;
-- larger batches let the server pay the round trip, the script call and every read and write of
-- a hash once for many buyers (see RedisStore's group admission).
-- The script is atomic, so nothing sees the keys between its start and its end: it reads the
-- request ids, holdings and stock once at the start, decides in Lua (tables for what the batch
-- changed), and writes the stock, holdings, answers, reservations and results once each at the
-- end. Per win only the XADD (the reservation id is its entry id) is a command of its own. Every
-- check of a request runs before that XADD, its only write before the end (Lua has no rollback).
-- A win is the user's latest result record; from the user's second reservation on, it is also
-- kept per reservation, as set_result.lua describes.
-- KEYS: meta, stock, buyers, req, orders, resv, results
-- ARGV: user, qty, request_id, then the same three for each further request
-- Reply: four elements per request, in order: {outcome, remaining, reservation_id, replayed};
-- outcome as Go's Outcome (1 won, 2 sold_out, 3 limit_reached, 4 not_started, 5 ended), or 0 when
-- qty is above the per-user limit (bad input: nothing written). Refusals write nothing; a win
-- writes it, and a replay writes its stored answer again.
-- Errors (for the whole batch): UNKNOWN_ACTIVITY, BAD_INPUT (malformed ARGV).
local m = redis.call('HMGET', KEYS[1], 'limit', 'start_ms', 'end_ms')
if not m[1] then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
if #ARGV == 0 or #ARGV % 3 ~= 0 then
  return redis.error_reply('BAD_INPUT want user, qty, request id triples')
end
local limit = tonumber(m[1])
local max_reservations = 32 -- admission.MaxResultReservations
-- The most arguments one command gets: Lua's unpack is bounded by its C stack (about 8000).
local chunk = 1000

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

-- hmget reads fields of key, any number of them; a missing field is false.
local function hmget(key, fields)
  local out = {}
  for i = 1, #fields, chunk do
    local v = redis.call('HMGET', key, unpack(fields, i, math.min(i + chunk - 1, #fields)))
    for j = 1, #v do out[#out + 1] = v[j] end
  end
  return out
end

-- A pending write of hash fields: each field once, in the order first put, with its last value;
-- false deletes the field.
local function fields()
  return {order = {}, val = {}}
end
local function put(w, f, v)
  if w.val[f] == nil then w.order[#w.order + 1] = f end
  w.val[f] = v
end
local function flush(key, w)
  local set, del = {}, {}
  for _, f in ipairs(w.order) do
    local v = w.val[f]
    if v then
      set[#set + 1], set[#set + 2] = f, v
    else
      del[#del + 1] = f
    end
  end
  for i = 1, #set, chunk do -- chunk is even: a field stays with its value
    redis.call('HSET', key, unpack(set, i, math.min(i + chunk - 1, #set)))
  end
  for i = 1, #del, chunk do
    redis.call('HDEL', key, unpack(del, i, math.min(i + chunk - 1, #del)))
  end
end

-- Request ids are scoped by user so that one user cannot replay another's answer.
local rks, users = {}, {}
for i = 1, #ARGV, 3 do
  rks[#rks + 1] = ARGV[i] .. '\0' .. ARGV[i + 2]
  users[#users + 1] = ARGV[i]
end
local answers, v = {}, hmget(KEYS[4], rks) -- request key → stored answer
for j = 1, #rks do answers[rks[j]] = v[j] end
local held = {} -- user → items held; not read when the window is closed (nothing can win)
if closed == 0 then
  v = hmget(KEYS[3], users)
  for j = 1, #users do held[users[j]] = tonumber(v[j]) or 0 end
end

local req_w, buyers_w, resv_w = fields(), fields(), fields()
local wins, sold = {}, 0 -- wins: user, reservation id, user, ...
local out, n = {}, 0
local function answer(outcome, remaining, resv, replayed)
  out[n + 1], out[n + 2], out[n + 3], out[n + 4] = outcome, remaining, resv, replayed
  n = n + 4
end

for j = 1, #rks do
  local i = 3 * j - 2
  local user, qty, rk = ARGV[i], tonumber(ARGV[i + 1]), rks[j]
  local first = answers[rk]
  if first then
    -- Written again, unchanged: a replay then writes, so a WAIT behind it (replicas_ack) covers
    -- the first write too, which may not have reached the replicas when it was answered.
    put(req_w, rk, first)
    local was, resv = string.match(first, '^(%-?%d+):(.*)$')
    answer(1, tonumber(was), resv, 1)
  elseif closed ~= 0 then
    answer(closed, left, '', 0)
  elseif qty > limit then
    answer(0, left, '', 0)
  elseif held[user] + qty > limit then
    answer(3, left, '', 0)
  elseif left < qty then
    answer(2, left, '', 0)
  else
    left, sold = left - qty, sold + qty
    held[user] = held[user] + qty
    put(buyers_w, user, string.format('%d', held[user]))
    local id = redis.call('XADD', KEYS[5], '*', 'user', user, 'qty', ARGV[i + 1], 'req', ARGV[i + 2], 'at', now)
    put(resv_w, id, ARGV[i + 1] .. ':' .. user)
    -- %d: plain concatenation would print a large stock as 1.1258999068426e+15.
    first = string.format('%d', left) .. ':' .. id
    answers[rk] = first
    put(req_w, rk, first)
    wins[#wins + 1], wins[#wins + 2] = user, id
    answer(1, left, id, 0)
  end
end

if sold > 0 then
  -- One exact integer step on the server, as the decrements of each win would have been.
  redis.call('DECRBY', KEYS[2], sold)
  flush(KEYS[3], buyers_w)
  flush(KEYS[6], resv_w)

  -- Each winner's queued record: their latest record and list of reservations, read once for
  -- the batch (user, then user\0) and folded in Lua for each of their wins in order.
  local keys, st, res_w = {}, {}, fields()
  for k = 1, #wins, 2 do
    local user = wins[k]
    if not st[user] then
      st[user] = {}
      keys[#keys + 1], keys[#keys + 2] = user, user .. '\0'
    end
  end
  v = hmget(KEYS[7], keys)
  for k = 1, #keys, 2 do
    st[keys[k]] = {top = v[k], list = v[k + 1]}
  end
  for k = 1, #wins, 2 do
    local user, id = wins[k], wins[k + 1]
    local s, lk = st[user], user .. '\0'
    local rec = '{"code":"queued","reservation_id":"' .. id .. '"}'
    local list = s.list
    if not list and s.top then
      local ok, r = pcall(cjson.decode, s.top)
      if ok and type(r) == 'table' and type(r.reservation_id) == 'string' and r.reservation_id ~= '' then
        put(res_w, lk .. r.reservation_id, s.top)
        list = r.reservation_id
      end
    end
    if list then
      list = list .. ' ' .. id
      local c = 0
      for _ in string.gmatch(list, '%S+') do c = c + 1 end
      while c > max_reservations do
        local oldest, rest = string.match(list, '^(%S+) (.*)$')
        put(res_w, lk .. oldest, false)
        list, c = rest, c - 1
      end
      put(res_w, lk, list)
      put(res_w, lk .. id, rec)
    end
    put(res_w, user, rec)
    s.top, s.list = rec, list
  end
  flush(KEYS[7], res_w)
end
flush(KEYS[4], req_w) -- the answers of wins and of replays
return out
