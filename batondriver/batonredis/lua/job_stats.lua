-- job_stats.lua: count the queue's jobs by state. Changes nothing.
--
-- KEYS: the queue keys (see joblib.lua).
--
-- Returns {paused (0|1), available, scheduled, running, completed, dead,
-- cancelled, parked, dropped, active concurrency keys, jobs ever dropped,
-- the earliest run_at of an available job or false}. Completed jobs past
-- their retention count until a fetch sweeps them.
local oldest = redis.call('ZRANGE', T, 0, 0, 'WITHSCORES')[2] or false
local m = redis.call('HMGET', M, 'paused', 'dropped')
local paused = 0
if m[1] == '1' then paused = 1 end
return {paused, redis.call('ZCARD', A), redis.call('ZCARD', S), redis.call('ZCARD', R),
  redis.call('ZCARD', C), redis.call('ZCARD', D), redis.call('ZCARD', X),
  redis.call('ZCARD', PK), redis.call('ZCARD', Y), redis.call('ZCARD', KI), tonumber(m[2]) or 0, oldest}
