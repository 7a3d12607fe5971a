-- Reads a user's place in an activity's waiting-room line (line_join.lua has the scores).
--
-- KEYS: meta, line, line_state
-- ARGV: user
-- Writes line_state drawn once, at the first read after the start.
-- Reply: {score, rank (-1 for an early joiner before the start), early_count, late_admitted,
-- now_ms, interval_ms (a string, "0" when the line kept no terms), session_ms (0 then)}, or nil
-- when the user has not joined.
-- Errors: UNKNOWN_ACTIVITY (no :meta).
local start = redis.call('HGET', KEYS[1], 'start_ms')
if not start then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
start = tonumber(start)
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not score then
  return false
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rank = -1
local drawn = redis.call('HEXISTS', KEYS[3], 'tat') == 1 or redis.call('HEXISTS', KEYS[3], 'drawn') == 1
if now >= start and not drawn then
  -- The first read after the start draws the line for good (line_join.lua).
  redis.call('HSET', KEYS[3], 'drawn', '1')
  drawn = true
end
if tonumber(score) >= 1 or drawn then
  rank = redis.call('ZRANK', KEYS[2], ARGV[1])
end
local early = redis.call('ZCOUNT', KEYS[2], '-inf', '(1')
local late = redis.call('ZCOUNT', KEYS[2], '1', 1 + (now - start))
local terms = redis.call('HMGET', KEYS[3], 'interval', 'session')
return {score, rank, early, late, now, terms[1] or '0', tonumber(terms[2] or 0)}
