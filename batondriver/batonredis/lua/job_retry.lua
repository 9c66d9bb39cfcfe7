-- job_retry.lua: an admin makes a dead, cancelled or scheduled job available
-- now, its attempts reset. An available job keeps its place and only has its
-- attempts reset.
--
-- KEYS: M A T S R C D X W J (see joblib.lua), then KEYS[11] the job's key.
-- ARGV[1] the job's ID
--
-- Returns {0, server ms, the array of the job's fields (F in joblib.lua)}, or
-- {NOT_FOUND} or {NOT_RETRYABLE, state} (see joblib.lua): running and
-- completed jobs cannot be retried. The job keeps its errors; its run_at
-- becomes now, its finished time and lease are cleared, and one waiting
-- fetcher is woken.
local key, id = KEYS[FIRST_JOB_KEY], ARGV[1]
local v = load_job(key)
if not v then return {NOT_FOUND} end
local from = v[FI.state]
if from == 'running' or from == 'completed' then
  return {NOT_RETRYABLE, from}
end
local now = now_ms()
if from == 'available' then
  update(key, v, {'attempt', '0'})
else
  redis.call('ZREM', state_set(from), id)
  update(key, v, {'state', 'available', 'attempt', '0', 'run_at', int(now), 'finished', '',
    'lease', '', 'lease_until', ''})
  local avail = new_batch()
  make_available(avail, id, v[FI.prio], now)
  wake(flush_available(avail))
end
return {0, now, v}
