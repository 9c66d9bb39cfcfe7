-- job_extend.lua: renew the leases of running jobs.
--
-- KEYS: the queue keys (see joblib.lua), then KEYS[16..15+n] the jobs' keys.
-- ARGV[1] TTL in ms
-- ARGV[2i], ARGV[2i+1] the ID and lease of the i-th job
--
-- Returns {server ms, then the 1-based indexes of the jobs whose leases were
-- no longer held}. A lease is held while the job is running with that lease
-- and lease_until is after now; an expired lease not yet taken back is lost
-- too, and is never extended.
local ttl = tonumber(ARGV[1])
local now = now_ms()
local until_ = now + ttl
local suntil = int(until_)
local out = {now}
local running = {}
for i = 1, #KEYS - FIRST_JOB_KEY + 1 do
  local key, id, lease = KEYS[FIRST_JOB_KEY + i - 1], ARGV[2 * i], ARGV[2 * i + 1]
  local v = redis.call('HMGET', key, 'state', 'lease', 'lease_until')
  if v[1] == 'running' and v[2] == lease and tonumber(v[3]) > now then
    redis.call('HSET', key, 'lease_until', suntil)
    running[#running + 1] = until_
    running[#running + 1] = id
  else
    out[#out + 1] = i
  end
end
zadd(R, running)
return out
