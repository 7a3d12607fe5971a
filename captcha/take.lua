-- Takes a captcha for its owner: when the challenge was issued to this user for this activity, it
-- returns the challenge and deletes the captcha's three keys in the same step, so that only one
-- caller ever gets it. Anyone else (another user, or the user on another activity) gets nothing
-- and deletes nothing: they cannot use up a captcha that is not theirs. The owner is read from
-- the challenge's JSON (redis.go, type stored); a challenge without an activity (written by an
-- earlier build) belongs to no activity and is refused, and expires with its TTL.
--
-- KEYS: challenge, png, fetches (one hash tag)
-- ARGV: user, activity
-- Reply: the challenge's JSON, as Put stored it, when it exists and ARGV owns it; else nil.
-- A value that is not a JSON object (not written by Put) has no owner: nil, and nothing is deleted.
local v = redis.call('GET', KEYS[1])
if not v then
  return false
end
local ok, c = pcall(cjson.decode, v)
if not ok or type(c) ~= 'table' or c.u ~= ARGV[1] or c.a ~= ARGV[2] then
  return false
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return v
