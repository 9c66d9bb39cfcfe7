-- job_stats.lua: count the queue's jobs by state. Changes nothing.
--
-- KEYS: the queue keys (see joblib.lua). This script builds job keys as
-- J .. id: the IDs come from A (see the exception in joblib.lua).
--
-- Returns {paused (0|1), available, scheduled, running, completed, dead,
-- cancelled, parked, dropped, active concurrency keys, jobs ever dropped,
-- the oldest available run_at or false}. Completed jobs past their
-- retention count until a fetch sweeps them.
--
-- The oldest available run_at is the earliest run_at of the jobs at the
-- front of each priority band of A (the next to be fetched of each
-- priority): the one that has waited longest, unless a job became available
-- well after its run_at (a scheduled job swept late, a promoted parked job)
-- and so queued behind younger ones.
local oldest = false
for prio = 0, MAX_PRIORITY do
  local first = redis.call('ZRANGE', A, prio * SPAN, (prio + 1) * SPAN - 1, 'BYSCORE', 'LIMIT', 0, 1)[1]
  if first then
    local at = tonumber(redis.call('HGET', J .. first, 'run_at'))
    if at and (not oldest or at < oldest) then oldest = at end
  end
end
local m = redis.call('HMGET', M, 'paused', 'dropped')
local paused = 0
if m[1] == '1' then paused = 1 end
return {paused, redis.call('ZCARD', A), redis.call('ZCARD', S), redis.call('ZCARD', R),
  redis.call('ZCARD', C), redis.call('ZCARD', D), redis.call('ZCARD', X),
  redis.call('ZCARD', PK), redis.call('ZCARD', Y), redis.call('ZCARD', KI), tonumber(m[2]) or 0, oldest}
