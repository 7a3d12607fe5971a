-- Puts a user in an activity's waiting-room line, once (package waitroom). An early joiner (before
-- the start, while no late joiner has come) is scored by its lottery draw in [0, 1); a late joiner
-- gets the next free admission offset (ms after the start: the later of now and the offset after
-- the last joiner's, the first one after every early joiner's turn) and is scored 1 + offset, so
-- it ranks behind every early joiner and every earlier late joiner. A user already in the line
-- keeps the score taken first. No step loops over the line: ZSCORE, ZADD, ZRANK, ZCOUNT.
-- Once the start has passed (or a late joiner came) the line is drawn and stays drawn (line_state
-- drawn, set by a join or a read after the start): a forced redefinition that moves the start
-- later, or a promoted replica whose clock is behind, cannot let an early joiner in among ranks
-- already told.
--
-- KEYS: meta, line (sorted set user → score), line_state (hash: tat, the next free offset;
-- drawn, once the early joiners are ranked)
-- ARGV: user, draw (a double in [0, 1)), interval_ms (a positive double)
-- Reply: {joined (1 when this call took the place), score, rank (-1 for an early joiner before
-- the start), early_count, late_admitted (late joiners whose offset has come), now_ms}; scores as
-- strings, exact doubles.
-- Errors: UNKNOWN_ACTIVITY (no :meta), BAD_INPUT (malformed ARGV).
local start = redis.call('HGET', KEYS[1], 'start_ms')
if not start then
  return redis.error_reply('UNKNOWN_ACTIVITY no such activity')
end
start = tonumber(start)
local draw, interval = tonumber(ARGV[2]), tonumber(ARGV[3])
if ARGV[1] == nil or ARGV[1] == '' or not draw or draw < 0 or draw >= 1 or not interval or interval <= 0 then
  return redis.error_reply('BAD_INPUT want user, draw in [0, 1), positive interval')
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
return {joined, score, rank, early, late, now}
