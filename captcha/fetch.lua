-- Counts one image fetch of a captcha, atomically with the check that the captcha exists, so that
-- fetching unknown ids creates no keys.
--
-- KEYS[1]  the captcha
-- KEYS[2]  its fetch counter
-- Returns the new count, or -1 when the captcha does not exist.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
local n = redis.call('INCR', KEYS[2])
if n == 1 then
  -- The counter lives exactly as long as the captcha.
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl > 0 then
    redis.call('PEXPIRE', KEYS[2], ttl)
  end
end
return n
