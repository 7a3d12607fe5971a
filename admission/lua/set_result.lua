-- Stores a user's result record, only for an activity that exists (no stray keys).
-- KEYS: meta, results
-- ARGV: user, result JSON
-- Errors: UNKNOWN_ACTIVITY.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
