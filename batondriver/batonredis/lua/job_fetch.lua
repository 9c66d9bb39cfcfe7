-- job_fetch.lua: admit due jobs, take back expired leases, sweep expired
-- completed, dropped and dead jobs and unique claims, then lease available
-- jobs to the caller.
--
-- KEYS: the queue keys (see joblib.lua). This script builds job keys as J ..
-- id and concurrency keys' keys from K: the IDs come from the available
-- lists, S, R and C, the concurrency keys from those jobs (see the
-- exception in joblib.lua).
-- ARGV[1] most jobs to lease (n; 0: only the steps below, no lease)
-- ARGV[2] lease TTL in ms
-- ARGV[3] recover delay in ms
-- ARGV[4] n fresh random leases of LEASE_LEN characters each, one after the
--         other, one for each job that may be leased (one string rather than
--         n arguments: an idle poll would pay for n unused arguments)
-- ARGV[5] dead retention in ms: dead and cancelled jobs that finished longer
--         ago are deleted; "0" keeps them
-- ARGV[6] dropped retention in ms, the same for dropped jobs
-- ARGV[7] "1" to chain jobs behind the keyed jobs leased (see lease in
--         joblib.lua), else "0"
-- ARGV[8] the last server time in ms at which the caller still waits for
--         the reply, "0" if it waits for ever: a call run later (it waited
--         behind a stalled server) leases nothing, since nobody would run
--         what it leased
-- ARGV[9] the nonce of this call's record (see settle in joblib.lua), ""
--         for none; with a nonce, KEYS[16] is the record's key
-- ARGV[10] the caller's lost calls to settle first, "nonce:waits ..." (see
--         settle), their record keys in KEYS after the record's key
--
-- Returns {server ms, paused (0|1), recovered count, earliest scheduled
-- run_at or false, more (1 if n jobs were leased and more are available,
-- else 0), the indexes of the lost calls left unsettled (an array), then per
-- leased job its ID and the array of its fields (F in joblib.lua)}, jobs in
-- fetch order: priority, then arrival.
--
-- The lost calls are settled first: the jobs they leased, given back, may
-- be leased again here, their attempts not counted twice.
--
-- Each step handles at most BATCH jobs, so a fetch costs a bounded time:
--  1. scheduled jobs whose run_at has come are admitted (a keyed job may be
--     parked, or by its on-busy policy dropped or rescheduled);
--  2. running jobs whose lease_until has come are taken back, their key
--     slots freed (promoting parked jobs), their attempt counted and the
--     error "lease expired" recorded: dead if the attempts are used up, or
--     cancelled if a cancel was requested (job_cancel.lua), else
--     scheduled RecoverDelay from now (admitted at once if 0); a job chained
--     behind one of them goes back to the head of its key's parked jobs
--     first, its attempt not counted;
--  3. completed jobs whose retention ended are deleted, and so are dead and
--     cancelled jobs older than the dead retention, dropped ones older than
--     the dropped retention, and lapsed period claims of unique keys.
-- Unless the queue is paused or the caller gave up (ARGV[8]), up to n
-- available jobs are then leased (first, jobs an older version left in its
-- sorted set move to the lists: LEGACY in joblib.lua); a keyed job gets its key's next fencing
-- token, and a job unique while running claims its unique key (one unique
-- while queued gives it up: start_claims in joblib.lua). Jobs made available by steps 1 and 2 and not
-- leased here wake other fetchers; when no job is left available, the wake
-- list is deleted. A job step 2 schedules before every job scheduled as the
-- call began wakes one fetcher, paused or not, as an outcome's does.
local max, ttl, delay = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()
local waits = tonumber(ARGV[8])
if waits > 0 and now > waits then max = 0 end
local snow = int(now)
local avail = new_batch()
local rec
if ARGV[9] ~= '' then rec = {KEYS[FIRST_JOB_KEY], ARGV[9]} end
local unsettled = settle(avail, now, KEYS, FIRST_JOB_KEY + (rec and 1 or 0), ARGV[10])

-- 1. Due scheduled jobs, in run_at order. They keep their run_at: when they
-- became due. The head of S is looked at first: usually nothing is due, and
-- it is also the earliest run_at to report.
local head = redis.call('ZRANGE', S, 0, 0, 'WITHSCORES')
local next_run_at = tonumber(head[2]) or false
local first_run_at = next_run_at -- the queue's earliest as the call began
local due = {}
if next_run_at and next_run_at <= now then
  due = redis.call('ZRANGE', S, '-inf', now, 'BYSCORE', 'LIMIT', 0, BATCH, 'WITHSCORES')
end
local resched = {}
if #due > 0 then
  local ids = {}
  for i = 1, #due, 2 do ids[#ids + 1] = due[i] end
  redis.call('ZREM', S, unpack(ids))
  for i = 1, #due, 2 do
    local id = due[i]
    local key = J .. id
    local v = redis.call('HMGET', key, 'prio', 'key', 'limit', 'onbusy', 'delay', 'errors', 'attempt', 'ukey',
      'uscope')
    if v[1] then
      local j = {}
      j[FI.prio], j[FI.key], j[FI.limit], j[FI.onbusy], j[FI.delay], j[FI.errors], j[FI.attempt] =
        v[1], v[2], v[3], v[4], v[5], v[6], v[7]
      local t = {}
      local code, at = admit(avail, t, id, j, now, v[4] and v[4] ~= 'wait', false)
      if code == SCHEDULED then
        resched[#resched + 1] = at
        resched[#resched + 1] = id
      elseif code == DROPPED then
        unclaim(v[8], v[9], id)
      end
      redis.call('HSET', key, unpack(t))
    end
  end
  zadd(S, resched)
end
local s_changed = #due > 0 -- then S's head is looked at again, at the end

-- 2. Expired leases.
local expired = redis.call('ZRANGE', R, '-inf', now, 'BYSCORE', 'LIMIT', 0, BATCH)
if #expired > 0 then
  redis.call('ZREM', R, unpack(expired))
  local sched, dead, cancelled = {}, {}, {}
  for _, id in ipairs(expired) do
    local key = J .. id
    local v = redis.call('HMGET', key, 'attempt', 'max', 'prio', 'errors', 'key', 'limit', 'ukey', 'uscope', 'next',
      'cancel', 'cancel_reason')
    if v[1] then
      local attempt = tonumber(v[1])
      local cancel = v[10] and v[10] ~= ''
      local msg = 'lease expired'
      if cancel then msg = cancel_error(v[11], msg) end
      local errors = add_error({errors = v[4]}, attempt, now, msg)
      local t = {'errors', errors, 'lease', '', 'lease_until', ''}
      if v[9] and v[9] ~= '' then
        unchain(v[9], id, now)
        put(t, 'next', '')
      end
      release(avail, id, v[5])
      if v[8] == 'running' or attempt >= tonumber(v[2]) or cancel then unclaim(v[7], v[8], id) end
      if cancel then -- not run again
        cancel_end(t, now)
        cancelled[#cancelled + 1] = now
        cancelled[#cancelled + 1] = id
      elseif attempt >= tonumber(v[2]) then
        put(t, 'state', 'dead', 'finished', snow)
        dead[#dead + 1] = now
        dead[#dead + 1] = id
      else
        reclaim(v[7], v[8], id, now)
        if delay > 0 then
          put(t, 'state', 'scheduled', 'run_at', int(now + delay))
          sched[#sched + 1] = now + delay
          sched[#sched + 1] = id
        else
          local j = {}
          j[FI.prio], j[FI.key], j[FI.limit] = v[3], v[5], v[6]
          put(t, 'run_at', snow)
          admit(avail, t, id, j, now, false, false)
        end
      end
      redis.call('HSET', key, unpack(t))
    end
  end
  zadd(S, sched)
  zadd(D, dead)
  zadd(X, cancelled)
  if #sched > 0 then s_changed = true end
end

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
local dead_retention, dropped_retention = tonumber(ARGV[5]), tonumber(ARGV[6])
if dead_retention > 0 then
  sweep(D, now - dead_retention)
  sweep(X, now - dead_retention)
end
if dropped_retention > 0 then
  sweep(Y, now - dropped_retention)
end
local lapsed = redis.call('ZRANGE', UP, '-inf', now, 'BYSCORE', 'LIMIT', 0, BATCH)
if #lapsed > 0 then
  for _, u in ipairs(lapsed) do
    local c = redis.call('HGET', U, u)
    if c then
      local expiry = tonumber(string.sub(c, 1, string.find(c, ':', 1, true) - 1))
      if expiry > 0 and expiry <= now then redis.call('HDEL', U, u) end
    end
  end
  redis.call('ZREM', UP, unpack(lapsed))
end

if s_changed then
  next_run_at = tonumber(redis.call('ZRANGE', S, 0, 0, 'WITHSCORES')[2]) or false
end
-- A job this call scheduled (a lease taken back, retried after the recover
-- delay) due before every job scheduled as it began wakes one fetcher, as
-- an insert's or an outcome's does (schedule in joblib.lua): nobody else
-- knows it. One due when it began (a due job, rescheduled by its on-busy
-- policy) is known to every fetcher that knew that job's run_at, and they
-- fetch now.
local earlier = 0
if next_run_at and (not first_run_at or next_run_at < first_run_at) then earlier = 1 end

local paused, fence, bands = read_meta(max)
if paused then
  flush_available(avail)
  wake(earlier)
  return {now, 1, #expired, next_run_at, 0, unsettled}
end

local out = {now, 0, #expired, next_run_at, 0, unsettled}
local n, left, made, promoted = lease(out, max, ttl, ARGV[4], now, fence, bands, avail, ARGV[7] == '1', {}, rec)
if n < max then
  redis.call('DEL', W)
else
  if left > 0 then out[5] = 1 end
  if made > 0 then wake(math.min(made, left)) end
end
if promoted > 0 then -- by the chains (see chain_next), after the lease
  out[5] = 1
  wake(promoted)
end
wake(earlier) -- after the DEL of W
return out
