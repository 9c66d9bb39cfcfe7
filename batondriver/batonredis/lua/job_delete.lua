-- job_delete.lua: remove a job that is not running.
--
-- KEYS: the queue keys (see joblib.lua), then KEYS[16] the job's key. This
-- script builds its concurrency key's keys from K (see joblib.lua).
-- ARGV[1] the job's ID
--
-- Returns 0, or NOT_FOUND or RUNNING (see joblib.lua). An available job
-- leaves its list with an LREM, which reads the list up to it (as asynq's
-- delete of a pending task does). An available keyed
-- job frees its slot and a parked one leaves its key's queue, promoting
-- parked jobs into free slots; the job gives up its unique key (unless it is
-- a period's claim, which lapses with the period).
local key, id = KEYS[FIRST_JOB_KEY], ARGV[1]
local v = redis.call('HMGET', key, 'state', 'key', 'ukey', 'prio', 'uscope')
local state, k = v[1], v[2]
if not state then return NOT_FOUND end
if state == 'running' then return RUNNING end
local avail = new_batch()
unqueue(avail, id, state, k, v[4])
unclaim(v[3], v[5], id)
redis.call('DEL', key)
wake(flush_available(avail))
return 0
