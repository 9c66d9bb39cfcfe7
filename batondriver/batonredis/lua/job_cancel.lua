-- job_cancel.lua: an admin cancels a job.
--
-- KEYS: the queue keys (see joblib.lua), then KEYS[16] the job's key. This
-- script builds its concurrency key's keys from K (see joblib.lua).
-- ARGV[1] the job's ID
-- ARGV[2] the reason, recorded as the job's error
-- ARGV[3] the queue's notice channel (P:queue:{Q}:notices, a shard channel
--         of the queue's slot)
--
-- Returns {0, server ms, the array of the job's fields (F in joblib.lua)},
-- or {NOT_FOUND} or {NOT_CANCELLABLE, state} (see joblib.lua): completed,
-- cancelled, dead and dropped jobs cannot be cancelled.
--
-- A scheduled, parked or available job ends cancelled now (in X), the
-- reason recorded for its attempts so far: an available keyed job frees its
-- slot and a parked one leaves its key's parked jobs (unqueue), promoting
-- parked jobs into free slots in the same step, and a fetcher is woken for
-- each job promoted; it releases its unique claim as a cancelled job does
-- (a period's claim lapses with its period). A running job keeps running
-- and gets a cancel request (cancel, cancel_reason; see "Cancel requests"
-- in joblib.lua), unless it has one already, which is kept: the script
-- publishes "c|ID" on the notice channel, so that its worker stops it at
-- once, and job_extend.lua reports it all the same; whatever ends the
-- attempt but a completion ends the job cancelled.
local key, id, reason = KEYS[FIRST_JOB_KEY], ARGV[1], ARGV[2]
local v = load_job(key)
if not v then return {NOT_FOUND} end
local state = v[FI.state]
local now = now_ms()
if state == 'running' then
  if not v[FI.cancel] or v[FI.cancel] == '' then
    update(key, v, {'cancel', int(now), 'cancel_reason', reason})
  end
  redis.call('SPUBLISH', ARGV[3], 'c|' .. id)
  return {0, now, v}
end
if not QUEUED[state] then return {NOT_CANCELLABLE, state} end
local avail = new_batch()
unqueue(avail, id, state, v[FI.key], v[FI.prio])
local t = {'errors', add_error({errors = v[FI.errors]}, tonumber(v[FI.attempt]) or 0, now, reason)}
cancel_end(t, now)
update(key, v, t)
redis.call('ZADD', X, now, id)
unclaim(v[FI.ukey], v[FI.uscope], id)
wake(flush_available(avail))
return {0, now, v}
