-- Takes the admission decisions for a batch of requests to one activity, one after the other, each
-- exactly as if it ran alone: every decision is taken before the first write (Lua has no
-- rollback), and a later request sees what an earlier one decided (one user's two requests in one
-- call count against the limit together; a request id repeated in the call replays the first
-- answer). A batch of one is the plain case; larger batches let the server pay the round trip, the
-- script call, the activity's definition, the clock and the stock read once for many buyers (the
-- store's group admission, admit.go).
--
-- One field per user in :users holds everything the user's wins need, one XADD per call carries
-- all of the call's wins, and the stock is written once per call. There is no "queued" result
-- record per win: set_result.lua writes them before it writes the user's next record, and the
-- store's polls derive the others (results.go, foldWins).
--
-- :users, field <user>: "<held> <folded>\n" then one record per win, oldest first:
--   <length of the request id>:<request id><reservation id>;
-- held is the items the user holds, the records are the request ids' first answers and, in order,
-- the user's reservation ids; folded counts the leading records whose "queued" result
-- set_result.lua has written into :results (a poll derives the others). A request id may hold any
-- byte, hence its length.
-- :orders gets one entry per call with wins: at <ms>, left <stock before the call>, then per win
-- the pair <user>, "<qty> <request id>"; the k-th win of entry E (k from 1) is reservation "E-k",
-- and its remaining (a replay's answer) is left less the qty of wins 1 to k. Entries are never
-- deleted (a dead letter is a copy), so a replay can always read its win's.
-- :meta field wins counts the wins ever appended to :orders (Snapshot.Queued, the queue's backlog),
-- and field buyers the users whose held is above 0 (Snapshot.Buyers; release.lua lowers it).
--
-- KEYS: meta, stock, users, orders
-- ARGV: user, qty, request_id, then the same three for each further request
-- Reply: four elements per request, in order: {outcome, remaining, reservation_id, replayed};
-- outcome as Go's Outcome (1 won, 2 sold_out, 3 limit_reached, 4 not_started, 5 ended), or 0 when
-- qty is above the per-user limit (bad input: nothing written); replayed is 0 for a decision
-- taken now, and for a replay the qty of the win it replays (1 or more, whatever the repeat asks:
-- the edge signs it), read from the entry its remaining comes from, so a fresh decision's reply
-- costs nothing more. Refusals write nothing; a win writes it, and a replay writes its stored
-- answer again (so that a WAIT behind a retry covers the first write: replicas_ack).
-- Errors (for the whole batch): UNKNOWN_ACTIVITY, LAYOUT (an activity of an earlier build's key
-- layout, without layout 2 in :meta: nothing written), BAD_INPUT (malformed ARGV).
--
-- Commands: the field of every request's user is read with one HMGET (HGET for a call of one
-- request) before the decisions, and every changed field is written with one HSET at the end: a
-- redis.call costs far more than one more field of one.
-- Every decision is taken before the first write. The writes, only for a call with a win or a
-- replay, in this order: DECRBY (the first write: Redis refuses a script's write for OOM only
-- while the script has written nothing, so it fails, if at all, with nothing written), HINCRBY
-- meta wins, HINCRBY meta buyers (when the call has first-time holders), XADD, one HSET :users of
-- every winning user's new field and every replaying user's field unchanged, then (on the
-- activity's first win) the hash-table conversion at the end. A later write failing (a WRONGTYPE
-- left by an operator) leaves stock taken for wins nobody was told of: undersold, never oversold.
local m = redis.call('HMGET', KEYS[1], 'limit', 'start_ms', 'end_ms', 'layout')
if not m[1] then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
if m[4] ~= '2' then
  return redis.error_reply('LAYOUT no layout 2 in ' .. KEYS[1])
end
local nargv = #ARGV
if nargv == 0 or nargv % 3 ~= 0 then
  return redis.error_reply('BAD_INPUT want user, qty, request id triples')
end
local limit = tonumber(m[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local closed = 0
if now < tonumber(m[2]) then
  closed = 4
elseif now >= tonumber(m[3]) then
  closed = 5
end
local stock_s = redis.call('GET', KEYS[2])
local stock0 = tonumber(stock_s)
local left = stock0
local sub, find, format = string.sub, string.find, string.format
local EMPTY = {}

-- answer_in returns the reservation id that request id rid won, from the user's field v, or nil.
local function answer_in(v, rid)
  local p = find(v, '\n', 1, true) + 1
  local n, rl = #v, #rid
  while p <= n do
    local len, q = string.match(v, '^(%d+):()', p)
    len = tonumber(len)
    local e = find(v, ';', q + len, true)
    if len == rl and sub(v, q, q + len - 1) == rid then
      return sub(v, q + len, e - 1)
    end
    p = e + 1
  end
  return nil
end

-- remaining_of returns the stock left after the win of reservation id resv, and that win's qty,
-- from its stream entry.
local function remaining_of(resv)
  local e, k = string.match(resv, '^(%d+%-%d+)%-(%d+)$')
  local f = redis.call('XRANGE', KEYS[4], e, e)[1][2]
  local r, q = tonumber(f[4]), 0
  for j = 1, tonumber(k) do
    q = tonumber(string.match(f[4 + 2 * j], '^%d+'))
    r = r - q
  end
  return r, q
end

-- Every request's user's field, read at once: the j-th of fields is the j-th request's (a user
-- named twice is read twice: nothing is written before the decisions, so both read the same). A
-- call of one request reads it with HGET (v1) and writes at most one field (hu, hv): no tables
-- of arguments, nor one of replies. The table of the HMGET's arguments is then reused for the
-- HSET's.
local us, fields, v1, hu, hv = nil, nil, false, nil, nil
if nargv == 3 then
  v1 = redis.call('HGET', KEYS[3], ARGV[1])
else
  us = {}
  local j = 0
  for i = 1, nargv, 3 do
    j = j + 1
    us[j] = ARGV[i]
  end
  fields = redis.call('HMGET', KEYS[3], unpack(us))
end

local last, prev = {}, {}     -- user -> the user's latest win in this call; win -> their one before
-- Per win: user, qty, request id, remaining, held, the user's field as read; reply slots.
local wu, wq, wr, wl, wh, wv, wp = {}, {}, {}, {}, {}, {}, {}
local rewrite = nil           -- user -> field, for replays: their stored answers are written again
local out, n, nw, np = {}, 0, 0, 0
local nb = 0                  -- users who held nothing before their win in this call (:meta buyers)

for i = 1, nargv, 3 do
  local user, qs, rid = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local qty = 1
  if qs ~= '1' then qty = tonumber(qs) end
  -- A user's second request in this call: as read (nothing is written yet), unless they won.
  local k = last[user]
  local v
  if k then
    v = wv[k]
  else
    v = fields and fields[n / 4 + 1] or v1   -- n counts the reply slots, 4 per request
  end
  local first
  if v then first = answer_in(v, rid) end
  while not first and k do
    if wr[k] == rid then break end
    k = prev[k]
  end
  if first then
    rewrite = rewrite or {}
    rewrite[user] = v
    local r, q = remaining_of(first)
    out[n + 1], out[n + 2], out[n + 3], out[n + 4] = 1, r, first, q
  elseif k then
    out[n + 1], out[n + 2], out[n + 3], out[n + 4] = 1, wl[k], '', wq[k]
    wp[np + 1], wp[np + 2] = n + 3, k
    np = np + 2
  elseif closed ~= 0 then
    out[n + 1], out[n + 2], out[n + 3], out[n + 4] = closed, left, '', 0
  elseif qty > limit then
    out[n + 1], out[n + 2], out[n + 3], out[n + 4] = 0, left, '', 0
  else
    local held = 0
    local lk = last[user]
    if lk then
      held = wh[lk]
    elseif v then
      held = tonumber(string.match(v, '^%d+'))
    end
    if held + qty > limit then
      out[n + 1], out[n + 2], out[n + 3], out[n + 4] = 3, left, '', 0
    elseif left < qty then
      out[n + 1], out[n + 2], out[n + 3], out[n + 4] = 2, left, '', 0
    else
      left = left - qty
      if held == 0 then nb = nb + 1 end
      nw = nw + 1
      wu[nw], wq[nw], wr[nw], wl[nw], wh[nw], wv[nw] = user, qs, rid, left, held + qty, v
      prev[nw], last[user] = lk, nw
      out[n + 1], out[n + 2], out[n + 3], out[n + 4] = 1, left, '', 0
      wp[np + 1], wp[np + 2] = n + 3, nw
      np = np + 2
    end
  end
  n = n + 4
end

-- The one HSET of every changed field (the winners' new fields, the replays'), its arguments in
-- us: one command, not one per user.
local hn = 0
if nw > 0 then
  -- Decimal strings of small integers (win numbers, request id lengths): a number turned into a
  -- string costs Lua a sprintf (about 2,500 instructions); a table of constants, a few per entry.
  local IDX = EMPTY
  if nw >= 8 then
    IDX = {'1','2','3','4','5','6','7','8','9','10','11','12','13','14','15','16','17','18','19','20','21','22','23','24','25','26','27','28','29','30','31','32','33','34','35','36','37','38','39','40','41','42','43','44','45','46','47','48','49','50','51','52','53','54','55','56','57','58','59','60','61','62','63','64'}
  end
  redis.call('DECRBY', KEYS[2], stock0 - left)
  redis.call('HINCRBY', KEYS[1], 'wins', nw)
  if nb > 0 then
    redis.call('HINCRBY', KEYS[1], 'buyers', nb)
  end
  local x, xn = {KEYS[4], '*', 'at', now, 'left', stock_s}, 6
  for k = 1, nw do
    x[xn + 1], x[xn + 2] = wu[k], wq[k] .. ' ' .. wr[k]
    xn = xn + 2
  end
  local e = redis.call('XADD', unpack(x)) .. '-'
  local ids = {}
  for k = 1, nw do
    ids[k] = e .. (IDX[k] or format('%d', k))
  end
  for j = 1, np, 2 do
    out[wp[j]] = ids[wp[j + 1]]
  end
  for k = 1, nw do
    local user = wu[k]
    if last[user] == k then
      local r, v, j = wr[k], wv[k], prev[k]
      local held = wh[k]
      if held == 1 then held = '1' else held = format('%d', held) end
      if not v and not j then
        -- A first-time buyer's one win, the common case: one string.
        v = held .. ' 0\n' .. (IDX[#r] or format('%d', #r)) .. ':' .. r .. ids[k] .. ';'
      else
        local rec = (IDX[#r] or format('%d', #r)) .. ':' .. r .. ids[k] .. ';'
        while j do
          r = wr[j]
          rec = (IDX[#r] or format('%d', #r)) .. ':' .. r .. ids[j] .. ';' .. rec
          j = prev[j]
        end
        if v then
          local nl = find(v, '\n', 1, true)
          v = held .. ' ' .. string.match(v, '^%d+ (%d+)') .. sub(v, nl) .. rec
        else
          v = held .. ' 0\n' .. rec
        end
      end
      if us then us[hn + 1], us[hn + 2] = user, v else hu, hv = user, v end
      hn = hn + 2
    end
  end
end
if rewrite then
  -- A replay writes the stored answers again, unchanged (replicas_ack), unless the user also won
  -- in this call.
  for user, v in pairs(rewrite) do
    if not last[user] then
      if us then us[hn + 1], us[hn + 2] = user, v else hu, hv = user, v end
      hn = hn + 2
    end
  end
end
if us and hn > 0 then
  redis.call('HSET', KEYS[3], unpack(us, 1, hn))
elseif hu then
  redis.call('HSET', KEYS[3], hu, hv)
end

-- Redis keeps a hash of up to hash-max-listpack-entries fields (512 by default) as a listpack,
-- which every HGET and HSET searches from the start: the first hundreds of wins of an activity
-- would cost several times a later one (docs/admission.md, "Small hashes"). A field longer than
-- hash-max-listpack-value turns a hash into a hash table for good; it is deleted at once, so
-- nobody sees it. A NUL-led field: user ids have no NUL byte, so it cannot be anyone's.
if nw > 0 then
  local enc = redis.call('OBJECT', 'ENCODING', KEYS[3])
  if enc == 'listpack' or enc == 'ziplist' then
    local pad = string.rep('\0', 8193)
    redis.call('HSET', KEYS[3], pad, '')
    redis.call('HDEL', KEYS[3], pad)
  end
end
return out
