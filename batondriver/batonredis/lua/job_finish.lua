-- job_finish.lua: record the outcomes of leased attempts.
--
-- KEYS: the queue keys (see joblib.lua), then KEYS[16..15+n] the jobs' keys.
-- This script builds concurrency keys' keys from K: the concurrency keys
-- are stored in the jobs, and it may lease jobs popped from A (see the
-- exception in joblib.lua).
-- ARGV[1] retention of completed jobs in ms (0: delete them at once)
-- ARGV[2] how many available jobs to lease to the caller afterwards (0:
--         none), ARGV[3] their lease TTL in ms, ARGV[4] their leases, as
--         for job_fetch.lua
-- ARGV[5i..5i+4] for the i-th job: ID, lease, outcome (completed, retry,
--   snooze, cancel, dead, again), error, run_at in ms for retry, snooze and
--   again ("0": now)
--
-- Returns {the number of stale outcomes, their 1-based indexes, then per
-- job leased its ID and fields (F in joblib.lua)}. A stale outcome's job
-- was not running with that lease, or its lease_until had come: it changes
-- nothing.
--
-- Leasing here hands the workers that just freed up straight to the next
-- jobs — a promoted one among them — without a fetch round trip. Nothing
-- is leased from a paused queue.
--
-- Every outcome clears the lease and first frees the job's key slot,
-- promoting the key's parked jobs into the freed slots (docs/concurrency.md).
-- Then (docs/job-states.md):
--   completed: deleted, or kept in C until now + retention, finished = now;
--   retry:     error recorded; dead if attempt >= max, else scheduled at
--              run_at (admitted at once if run_at is not after now);
--   snooze:    the attempt is given back, no error; scheduled as retry;
--   again:     a new run: attempt 0, runs + 1; scheduled or admitted as
--              retry — unless the job is unique while queued and a queued
--              twin holds its unique key, which then is the next run: the
--              job is completed;
--   cancel:    error recorded; cancelled (in X), finished = now;
--   dead:      error recorded; dead (in D), finished = now.
-- A job that ends releases its unique key, as does one unique while
-- running that stops running.
local retention = tonumber(ARGV[1])
local now = now_ms()
local snow = int(now)
local stale, ended, gone = {}, {}, {}
local completed, sched, dead, cancelled = {}, {}, {}, {}
local avail = new_batch()

-- End job id at key in a terminal state, listed in set, with the fields
-- in t besides.
local function finish(key, id, state, set, t)
  put(t, 'state', state, 'finished', snow)
  redis.call('HSET', key, unpack(t))
  set[#set + 1] = now
  set[#set + 1] = id
end

-- Complete job id at key, its lease cleared, kept until now + retention.
-- Its fields go to HSET directly: this runs for most outcomes.
local function complete(key, id)
  if retention == 0 then
    gone[#gone + 1] = key
    return
  end
  redis.call('HSET', key, 'lease', '', 'lease_until', '', 'state', 'completed', 'finished', snow)
  completed[#completed + 1] = now + retention
  completed[#completed + 1] = id
end

-- Run job id at key again at ms at: admitted now, or scheduled; t holds
-- fields to set besides.
local function again(key, id, j, at, t)
  if at <= now then
    put(t, 'run_at', snow)
    admit(avail, t, id, j, now, false, false)
  else
    put(t, 'state', 'scheduled', 'run_at', int(at))
    sched[#sched + 1] = at
    sched[#sched + 1] = id
  end
  redis.call('HSET', key, unpack(t))
end

for i = 1, #KEYS - FIRST_JOB_KEY + 1 do
  local key = KEYS[FIRST_JOB_KEY + i - 1]
  local a = 5 * i
  local id, held, outcome, msg, run_at = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], tonumber(ARGV[a + 4])
  local v = redis.call('HMGET', key, 'state', 'lease', 'lease_until', 'attempt', 'max', 'prio', 'errors',
    'key', 'limit', 'ukey', 'uscope', 'runs')
  if v[1] ~= 'running' or v[2] ~= held or tonumber(v[3]) <= now then
    stale[#stale + 1] = i
  elseif outcome == 'completed' and (v[8] or '') == '' and (v[10] or '') == '' then
    -- Completed with neither concurrency key nor unique key (most
    -- outcomes): no slot to free, no claim to release.
    ended[#ended + 1] = id
    complete(key, id)
  else
    ended[#ended + 1] = id
    local attempt = tonumber(v[4])
    local u, scope = v[10], v[11]
    release(avail, id, v[8])
    -- The job leaves running: a claim while running ends, and one held
    -- until done ends if this outcome ends the job.
    local ends = not (outcome == 'snooze' or outcome == 'again'
      or (outcome == 'retry' and attempt < tonumber(v[5])))
    if ends or scope == 'running' then unclaim(u, id) end
    local j = {}
    j[FI.prio], j[FI.key], j[FI.limit] = v[6], v[8], v[9]
    local t = {'lease', '', 'lease_until', ''}
    local errors = function() return add_error({errors = v[7]}, attempt, now, msg) end
    if outcome == 'completed' then
      complete(key, id)
    elseif outcome == 'retry' then
      put(t, 'errors', errors())
      if attempt >= tonumber(v[5]) then
        finish(key, id, 'dead', dead, t)
      else
        again(key, id, j, run_at, t)
      end
    elseif outcome == 'snooze' then
      put(t, 'attempt', int(math.max(attempt - 1, 0)))
      again(key, id, j, run_at, t)
    elseif outcome == 'again' then
      local c = scope == 'queued' and redis.call('HGET', U, u)
      local other = c and string.sub(c, string.find(c, ':', 1, true) + 1)
      if other and other ~= id and QUEUED[redis.call('HGET', J .. other, 'state')] then
        complete(key, id)
      else
        if scope == 'queued' then claim(u, id, 0) end
        put(t, 'attempt', '0', 'runs', int((tonumber(v[12]) or 0) + 1))
        again(key, id, j, run_at, t)
      end
    elseif outcome == 'cancel' then
      put(t, 'errors', errors())
      finish(key, id, 'cancelled', cancelled, t)
    else -- dead
      put(t, 'errors', errors())
      finish(key, id, 'dead', dead, t)
    end
  end
end

chunked('ZREM', R, ended)
for i = 1, #gone, 1000 do
  redis.call('DEL', unpack(gone, i, math.min(i + 999, #gone)))
end
zadd(C, completed)
zadd(S, sched)
zadd(D, dead)
zadd(X, cancelled)
local out = {#stale}
for i = 1, #stale do out[#out + 1] = stale[i] end
local max = tonumber(ARGV[2])
local mv = {}
if max > 0 then mv = redis.call('HMGET', M, 'paused', 'fence') end
if max == 0 or mv[1] == '1' then
  wake(flush_available(avail))
  return out
end
local n, left, made = lease(out, max, tonumber(ARGV[3]), ARGV[4], now, tonumber(mv[2]) or 0, avail)
if n == max and made > 0 then wake(math.min(made, left)) end
return out
