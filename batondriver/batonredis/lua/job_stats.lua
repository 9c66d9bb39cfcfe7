-- job_stats.lua: count the queue's jobs by state. Changes nothing.
--
-- KEYS: the queue keys (see joblib.lua). This script builds job keys as
-- J .. id: the IDs come from the available lists (see the exception in
-- joblib.lua).
--
-- Returns {paused (0|1), available, scheduled, running, completed, dead,
-- cancelled, parked, dropped, active concurrency keys, jobs ever dropped,
-- the oldest available run_at or false}. Completed jobs past their
-- retention count until a fetch sweeps them.
--
-- The oldest available run_at is the earliest run_at of the jobs at the
-- front of each available list (the next to be fetched of each priority):
-- the one that has waited longest, unless a job became available well
-- after its run_at (a scheduled job swept late, a promoted parked job) and
-- so queued behind younger ones.
local m = redis.call('HMGET', M, 'paused', 'dropped', unpack(BAND_FIELDS))
local oldest, available = false, 0
for _, p in ipairs(flagged(m, 3)) do
  local first = redis.call('LINDEX', A .. p, 0)
  if first then
    available = available + redis.call('LLEN', A .. p)
    local at = tonumber(redis.call('HGET', J .. first, 'run_at'))
    if at and (not oldest or at < oldest) then oldest = at end
  end
end
local paused = 0
if m[1] == '1' then paused = 1 end
return {paused, available, redis.call('ZCARD', S), redis.call('ZCARD', R),
  redis.call('ZCARD', C), redis.call('ZCARD', D), redis.call('ZCARD', X),
  redis.call('ZCARD', PK), redis.call('ZCARD', Y), redis.call('ZCARD', KI), tonumber(m[2]) or 0, oldest}
