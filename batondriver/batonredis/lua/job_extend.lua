-- job_extend.lua: renew the leases of running jobs.
--
-- KEYS: the queue keys (see joblib.lua), then KEYS[16..15+n] the jobs' keys.
-- This script builds the keys of the jobs chained behind them, and of the
-- jobs they are chained behind, from J (see the exception in joblib.lua).
-- ARGV[1] TTL in ms
-- ARGV[2i], ARGV[2i+1] the ID and lease of the i-th job
--
-- Returns {server ms, the 1-based indexes of the jobs whose leases were no
-- longer held, those of the jobs renewed whose cancel was requested
-- (job_cancel.lua)}, each an array. A lease is held while the job is
-- running with that lease and lease_until is after now; an expired lease
-- not yet taken back is lost too, and is never extended. The request is
-- read with the fields read anyway: no call more. A chain lives on one
-- lease: extending a job extends the job chained behind it, and extending
-- a chained job extends the job ahead of it (which alone is in R by its
-- lease_until).
local ttl = tonumber(ARGV[1])
local now = now_ms()
local until_ = now + ttl
local suntil = int(until_)
local lost, cancel = {}, {}
local running = {}
for i = 1, #KEYS - FIRST_JOB_KEY + 1 do
  local key, id, lease = KEYS[FIRST_JOB_KEY + i - 1], ARGV[2 * i], ARGV[2 * i + 1]
  local v = redis.call('HMGET', key, 'state', 'lease', 'lease_until', 'next', 'after', 'cancel')
  if v[1] == 'running' and v[2] == lease and tonumber(v[3]) > now then
    redis.call('HSET', key, 'lease_until', suntil)
    if v[6] and v[6] ~= '' then cancel[#cancel + 1] = i end
    -- In R is the job ahead, the chained one's score being +inf.
    local ahead, other = id, v[4]
    if v[5] and v[5] ~= '' then ahead, other = v[5], v[5] end
    if other and other ~= '' then
      local ov = redis.call('HMGET', J .. other, 'state', 'next', 'after')
      if ov[1] == 'running' and (ov[2] == id or ov[3] == id) then
        redis.call('HSET', J .. other, 'lease_until', suntil)
      end
    end
    running[#running + 1] = until_
    running[#running + 1] = ahead
  else
    lost[#lost + 1] = i
  end
end
zadd(R, running)
return {now, lost, cancel}
