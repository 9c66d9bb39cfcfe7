-- job_stats.lua: count the queue's jobs by state. Changes nothing.
--
-- KEYS: M A T S R C D X W J (see joblib.lua).
--
-- Returns {paused (0|1), available, scheduled, running, completed, dead,
-- cancelled, the earliest run_at of an available job or false}. Completed
-- jobs past their retention count until a fetch sweeps them.
local oldest = redis.call('ZRANGE', T, 0, 0, 'WITHSCORES')[2] or false
local paused = 0
if redis.call('HGET', M, 'paused') == '1' then paused = 1 end
return {paused, redis.call('ZCARD', A), redis.call('ZCARD', S), redis.call('ZCARD', R),
  redis.call('ZCARD', C), redis.call('ZCARD', D), redis.call('ZCARD', X), oldest}
