-- GCRA (generic cell rate algorithm) for one key, on the server's clock, in whole microseconds so
-- that every value is an exact integer in Lua's doubles (2^53 µs is about 285 years).
--
-- KEYS[1]  the key's theoretical arrival time (TAT), in µs since the Unix epoch
-- ARGV[1]  emission interval T: µs one event's token takes to refill
-- ARGV[2]  burst B: events that may pass at one instant
--
-- An event at now passes when TAT - now <= T * (B - 1): a fresh key lets B events through at once,
-- then one per T. Returns {allowed 0/1, remaining, retry_after_us, reset_after_us}.
local key = KEYS[1]
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local tat = tonumber(redis.call('GET', key)) or now
if tat < now then
  tat = now
end

local new_tat = tat + interval
local allow_at = new_tat - interval * burst

if now < allow_at then
  return {0, 0, allow_at - now, tat - now}
end

local reset = new_tat - now
redis.call('SET', key, string.format('%.0f', new_tat), 'PX', math.ceil(reset / 1000))
return {1, math.floor((now - allow_at) / interval), 0, reset}
