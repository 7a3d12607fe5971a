-- Puts a user in an activity's waiting-room line, once (package waitroom). An early joiner (before
-- the start, while no late joiner has come) is scored by its lottery draw in [0, 1); a late joiner
-- gets the next free admission offset (ms after the start: the later of now and the offset after
-- the last joiner's, the first one after every early joiner's turn) and is scored 1 + offset, so
-- it ranks behind every early joiner and every earlier late joiner. A user already in the line
-- keeps the score taken first. No step loops over the line: ZSCORE, ZADD, ZRANK, ZCOUNT.
-- Once the start has passed (or a late joiner came) the line is drawn and stays drawn (line_state
-- drawn, set by a join or a read after the start): a forced redefinition that moves the start
-- later, or a promoted replica whose clock is behind, cannot let an early joiner in among ranks
-- already told. The first join fixes the line's terms (line_state interval and session): every
-- later join moves the line at them whatever its ARGV say, so gateways configured with another
-- rate (a reload under way) place and admit nobody elsewhere than the line's first rate would.
--
-- KEYS: meta, line (sorted set user → score), line_state (hash: tat, the next free offset;
-- drawn, once the early joiners are ranked; interval and session, the line's terms)
-- ARGV: user, draw (a double in [0, 1)), interval_ms (a positive double), session_ms (a positive
-- whole number)
-- Reply: {joined (1 when this call took the place), score, rank (-1 for an early joiner before
-- the start), early_count, late_admitted (late joiners whose offset has come), now_ms,
-- interval_ms, session_ms (the line's terms)}; scores and the interval as strings, exact doubles.
-- Errors: UNKNOWN_ACTIVITY (no :meta), BAD_INPUT (malformed ARGV).
local start = redis.call('HGET', KEYS[1], 'start_ms')
if not start then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
start = tonumber(start)
local draw, interval, session = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if ARGV[1] == nil or ARGV[1] == '' or not draw or draw < 0 or draw >= 1 or not interval or interval <= 0 or
    not session or session <= 0 then
  return redis.error_reply('BAD_INPUT want user, draw in [0, 1), positive interval and session')
end
local terms = redis.call('HMGET', KEYS[3], 'interval', 'session')
if terms[1] and terms[2] then
  interval = tonumber(terms[1])
else
  -- The first join (or the first since the terms were kept: an older line) fixes them.
  terms = {ARGV[3], ARGV[4]}
  redis.call('HSET', KEYS[3], 'interval', ARGV[3], 'session', ARGV[4])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local user = ARGV[1]
local joined = 0
local score = redis.call('ZSCORE', KEYS[2], user)
local tat = redis.call('HGET', KEYS[3], 'tat')
local drawn = tat or redis.call('HEXISTS', KEYS[3], 'drawn') == 1
if now >= start and not drawn then
  redis.call('HSET', KEYS[3], 'drawn', '1')
  drawn = true
end
if not score then
  joined = 1
  if not drawn then
    score = ARGV[2]
  else
    if not tat then
      tat = redis.call('ZCOUNT', KEYS[2], '-inf', '(1') * interval
    end
    local off = math.max(now - start, tonumber(tat))
    tat = string.format('%.17g', off + interval)
    redis.call('HSET', KEYS[3], 'tat', tat)
    score = string.format('%.17g', 1 + off)
  end
  redis.call('ZADD', KEYS[2], score, user)
end
local rank = -1
if tonumber(score) >= 1 or drawn then
  rank = redis.call('ZRANK', KEYS[2], user)
end
local early = redis.call('ZCOUNT', KEYS[2], '-inf', '(1')
local late = redis.call('ZCOUNT', KEYS[2], '1', 1 + (now - start))
return {joined, score, rank, early, late, now, terms[1], tonumber(terms[2])}
