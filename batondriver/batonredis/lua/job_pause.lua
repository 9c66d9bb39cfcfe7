-- job_pause.lua: pause or resume fetching from the queue.
--
-- KEYS: the queue keys (see joblib.lua)
-- ARGV[1] "1" to pause, "0" to resume
--
-- Returns 0. Resuming wakes one waiting fetcher per available job (at most
-- 64), those still in an older version's sorted set (LEGACY, while M's seq
-- is set) counted too.
if ARGV[1] == '1' then
  redis.call('HSET', M, 'paused', '1')
elseif redis.call('HDEL', M, 'paused') == 1 then
  local mv = redis.call('HMGET', M, 'seq', unpack(BAND_FIELDS))
  local n = available_count(flagged(mv, 2))
  if mv[1] then n = n + redis.call('ZCARD', legacy_set()) end
  wake(n)
end
return 0
