-- job_retry.lua: an admin admits a dead, cancelled, dropped or scheduled job
-- now, its attempts reset. An available job keeps its place and only has
-- its attempts reset.
--
-- KEYS: the queue keys (see joblib.lua), then KEYS[16] the job's key. This
-- script builds its concurrency key's keys from K (see joblib.lua).
-- ARGV[1] the job's ID
--
-- Returns {0, server ms, the array of the job's fields (F in joblib.lua)}, or
-- {NOT_FOUND} or {NOT_RETRYABLE, state} (see joblib.lua): running, parked
-- and completed jobs cannot be retried. The job keeps its errors; its run_at
-- becomes now, its finished time and lease are cleared, and it is admitted
-- (docs/concurrency.md): a keyed job whose key is busy is parked. A fetcher
-- is woken if it became available. A job unique while queued or until done
-- takes its unique claim back if no twin holds it.
local key, id = KEYS[FIRST_JOB_KEY], ARGV[1]
local v = load_job(key)
if not v then return {NOT_FOUND} end
local from = v[FI.state]
if from == 'running' or from == 'completed' or from == 'parked' then
  return {NOT_RETRYABLE, from}
end
local now = now_ms()
if from == 'available' then
  update(key, v, {'attempt', '0'})
else
  redis.call('ZREM', state_set(from), id)
  local avail = new_batch()
  local t = {'attempt', '0', 'run_at', int(now), 'finished', '', 'lease', '', 'lease_until', ''}
  admit(avail, t, id, v, now, false, false)
  -- Queued again: unique while queued or until done, it takes its claim
  -- back, unless a twin took it meanwhile (a scheduled job holds its own).
  local u, scope = v[FI.ukey], v[FI.uscope]
  if u and u ~= '' and (scope == 'queued' or scope == 'until_done') and not claim_of(u, scope, now) then
    claim(u, scope, id, 0)
  end
  update(key, v, t)
  wake(flush_available(avail))
end
return {0, now, v}
