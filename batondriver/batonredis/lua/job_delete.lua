-- job_delete.lua: remove a job that is not running.
--
-- KEYS: M A T S R C D X W J (see joblib.lua), then KEYS[11] the job's key.
-- ARGV[1] the job's ID
--
-- Returns 0, or NOT_FOUND or RUNNING (see joblib.lua).
local key, id = KEYS[FIRST_JOB_KEY], ARGV[1]
local state = redis.call('HGET', key, 'state')
if not state then return NOT_FOUND end
if state == 'running' then return RUNNING end
if state == 'available' then
  local score = redis.call('ZSCORE', A, id)
  if score then
    redis.call('ZREM', T, t_member(id, tonumber(score)))
    redis.call('ZREM', A, id)
  end
else
  redis.call('ZREM', state_set(state), id)
end
redis.call('DEL', key)
return 0
