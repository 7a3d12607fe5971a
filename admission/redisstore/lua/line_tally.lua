-- Counts an activity's waiting-room line for the metrics (line_join.lua has the scores).
--
-- KEYS: meta, line, line_state
-- ARGV: lags in ms (whole numbers, zero or more)
-- Reply: {now_ms, length, early_count, interval_ms (a string, "0" before the first join),
-- session_ms (0 then), then per lag the late joiners whose offset has come by now less the lag}.
-- Errors: UNKNOWN_ACTIVITY (no :meta), BAD_INPUT (a lag that is no number).
local start = redis.call('HGET', KEYS[1], 'start_ms')
if not start then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
start = tonumber(start)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local terms = redis.call('HMGET', KEYS[3], 'interval', 'session')
local out = {now, redis.call('ZCARD', KEYS[2]), redis.call('ZCOUNT', KEYS[2], '-inf', '(1'),
  terms[1] or '0', tonumber(terms[2] or 0)}
for i = 1, #ARGV do
  local lag = tonumber(ARGV[i])
  if not lag then
    return redis.error_reply('BAD_INPUT lag ' .. ARGV[i])
  end
  local upto = now - lag - start
  if upto < 0 then
    out[#out + 1] = 0
  else
    out[#out + 1] = redis.call('ZCOUNT', KEYS[2], '1', 1 + upto)
  end
end
return out
