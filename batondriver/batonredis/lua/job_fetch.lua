-- job_fetch.lua: make due jobs available, take back expired leases, sweep
-- expired completed jobs, then lease available jobs to the caller.
--
-- KEYS: M A T S R C D X W J (see joblib.lua). This script builds job keys as
-- J .. id: the IDs come from A, S, R and C (see the exception in joblib.lua).
-- ARGV[1] most jobs to lease (n)
-- ARGV[2] lease TTL in ms
-- ARGV[3] recover delay in ms
-- ARGV[4] n fresh random leases of LEASE_LEN characters each, one after the
--         other, one for each job that may be leased (one string rather than
--         n arguments: an idle poll would pay for n unused arguments)
-- ARGV[5] dead retention in ms: dead and cancelled jobs that finished longer
--         ago are deleted; "0" keeps them
--
-- Returns {server ms, paused (0|1), recovered count, earliest scheduled
-- run_at or false, then per leased job its ID and the array of its fields
-- (F in joblib.lua)}, jobs in fetch order: priority, then arrival.
--
-- Each step handles at most BATCH jobs, so a fetch costs a bounded time:
--  1. scheduled jobs whose run_at has come become available;
--  2. running jobs whose lease_until has come are taken back, their attempt
--     counted and the error "lease expired" recorded: dead if the attempts
--     are used up, else scheduled RecoverDelay from now (available if 0);
--  3. completed jobs whose retention ended are deleted, and so are dead and
--     cancelled jobs older than the dead retention.
-- Unless the queue is paused, up to n available jobs are then leased. Jobs
-- made available by steps 1 and 2 and not leased here wake other fetchers;
-- when no job is left available, the wake list is deleted.
local max, ttl, delay = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()
local snow = int(now)
local avail = new_batch()

-- 1. Due scheduled jobs, in run_at order. They keep their run_at: when they
-- became due. The head of S is looked at first: usually nothing is due, and
-- it is also the earliest run_at to report.
local head = redis.call('ZRANGE', S, 0, 0, 'WITHSCORES')
local next_run_at = tonumber(head[2]) or false
local due = {}
if next_run_at and next_run_at <= now then
  due = redis.call('ZRANGE', S, '-inf', now, 'BYSCORE', 'LIMIT', 0, BATCH, 'WITHSCORES')
end
if #due > 0 then
  local ids = {}
  for i = 1, #due, 2 do
    local id = due[i]
    ids[#ids + 1] = id
    local key = J .. id
    local prio = redis.call('HGET', key, 'prio')
    if prio then
      redis.call('HSET', key, 'state', 'available')
      make_available(avail, id, prio, tonumber(due[i + 1]))
    end
  end
  redis.call('ZREM', S, unpack(ids))
end

-- 2. Expired leases.
local expired = redis.call('ZRANGE', R, '-inf', now, 'BYSCORE', 'LIMIT', 0, BATCH)
if #expired > 0 then
  redis.call('ZREM', R, unpack(expired))
  local sched, dead = {}, {}
  for _, id in ipairs(expired) do
    local key = J .. id
    local v = redis.call('HMGET', key, 'attempt', 'max', 'prio', 'errors')
    if v[1] then
      local attempt = tonumber(v[1])
      local errors = add_error({errors = v[4]}, attempt, now, 'lease expired')
      if attempt >= tonumber(v[2]) then
        redis.call('HSET', key, 'state', 'dead', 'finished', snow, 'errors', errors, 'lease', '', 'lease_until', '')
        dead[#dead + 1] = now
        dead[#dead + 1] = id
      elseif delay > 0 then
        redis.call('HSET', key, 'state', 'scheduled', 'run_at', int(now + delay), 'errors', errors, 'lease', '', 'lease_until', '')
        sched[#sched + 1] = now + delay
        sched[#sched + 1] = id
      else
        redis.call('HSET', key, 'state', 'available', 'run_at', snow, 'errors', errors, 'lease', '', 'lease_until', '')
        make_available(avail, id, v[3], now)
      end
    end
  end
  zadd(S, sched)
  zadd(D, dead)
  if #sched > 0 then due = {true} end -- S changed: look at its head again
end
local made = flush_available(avail)

-- 3. Completed jobs past their retention, then the dead set's.
local function sweep(set, upto)
  local old = redis.call('ZRANGE', set, '-inf', upto, 'BYSCORE', 'LIMIT', 0, BATCH)
  if #old > 0 then
    chunked('ZREM', set, old)
    local keys = {}
    for i, id in ipairs(old) do keys[i] = J .. id end
    redis.call('DEL', unpack(keys))
  end
end
sweep(C, now)
local dead_retention = tonumber(ARGV[5])
if dead_retention > 0 then
  sweep(D, now - dead_retention)
  sweep(X, now - dead_retention)
end

if #due > 0 then
  next_run_at = tonumber(redis.call('ZRANGE', S, 0, 0, 'WITHSCORES')[2]) or false
end

if redis.call('HGET', M, 'paused') == '1' then
  return {now, 1, #expired, next_run_at}
end

local out = {now, 0, #expired, next_run_at}
local popped = redis.call('ZPOPMIN', A, max)
local running, ids = {}, {} -- ids: members of T
local until_ = now + ttl
local suntil = int(until_)
for i = 1, #popped, 2 do
  local id = popped[i]
  local key = J .. id
  local v = load_job(key)
  if v then
    local k = (i - 1) / 2 -- 0-based: popped holds IDs and scores
    local attempt, lease = int(tonumber(v[FI.attempt]) + 1), string.sub(ARGV[4], k * LEASE_LEN + 1, (k + 1) * LEASE_LEN)
    redis.call('HSET', key, 'state', 'running', 'attempt', attempt, 'attempted', snow,
      'lease', lease, 'lease_until', suntil)
    v[FI.state], v[FI.attempt], v[FI.attempted], v[FI.lease], v[FI.lease_until] =
      'running', attempt, snow, lease, suntil
    running[#running + 1] = until_
    running[#running + 1] = id
    push_job(out, id, v)
  end
  ids[#ids + 1] = t_member(id, tonumber(popped[i + 1]))
end
zadd(R, running)
chunked('ZREM', T, ids)

if #popped < 2 * max then
  redis.call('DEL', W)
elseif made > 0 then
  wake(math.min(made, redis.call('ZCARD', A)))
end
return out
