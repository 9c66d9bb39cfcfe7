-- job_finish.lua: record the outcomes of leased attempts.
--
-- KEYS: M A T S R C D X W J (see joblib.lua), then KEYS[11..10+n] the jobs' keys.
-- ARGV[1] retention of completed jobs in ms (0: delete them at once)
-- ARGV[5i-3..5i+1] for the i-th job: ID, lease, outcome (completed, retry,
--   snooze, cancel, dead), error, run_at in ms for retry and snooze ("0": now)
--
-- Returns the 1-based indexes of stale outcomes: the job was not running
-- with that lease, or its lease_until had come. They change nothing.
--
-- Outcomes (docs/job-states.md); every one clears the lease:
--   completed: deleted, or kept in C until now + retention, finished = now;
--   retry:     error recorded; dead if attempt >= max, else scheduled at
--              run_at (available at once if run_at is not after now);
--   snooze:    the attempt is given back, no error; scheduled as retry;
--   cancel:    error recorded; cancelled (in X), finished = now;
--   dead:      error recorded; dead (in D), finished = now.
local retention = tonumber(ARGV[1])
local now = now_ms()
local snow = int(now)
local stale, ended, gone = {}, {}, {}
local completed, sched, dead, cancelled = {}, {}, {}, {}
local avail = new_batch()

-- End job id at key in a terminal state, listed in set.
local function finish(key, id, state, set, errors)
  redis.call('HSET', key, 'state', state, 'finished', snow, 'lease', '', 'lease_until', '', 'errors', errors)
  set[#set + 1] = now
  set[#set + 1] = id
end

-- Run job id at key again at ms at; t holds fields to set besides.
local function again(key, id, prio, at, t)
  if at <= now then
    t[#t + 1] = 'state'
    t[#t + 1] = 'available'
    at = now
    make_available(avail, id, prio, now)
  else
    t[#t + 1] = 'state'
    t[#t + 1] = 'scheduled'
    sched[#sched + 1] = at
    sched[#sched + 1] = id
  end
  t[#t + 1] = 'run_at'
  t[#t + 1] = int(at)
  redis.call('HSET', key, 'lease', '', 'lease_until', '', unpack(t))
end

for i = 1, #KEYS - FIRST_JOB_KEY + 1 do
  local key = KEYS[FIRST_JOB_KEY + i - 1]
  local a = 5 * i - 3
  local id, lease, outcome, msg, run_at = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], tonumber(ARGV[a + 4])
  local v = redis.call('HMGET', key, 'state', 'lease', 'lease_until', 'attempt', 'max', 'prio', 'errors')
  if v[1] ~= 'running' or v[2] ~= lease or tonumber(v[3]) <= now then
    stale[#stale + 1] = i
  else
    ended[#ended + 1] = id
    local attempt, j = tonumber(v[4]), {errors = v[7]}
    if outcome == 'completed' then
      if retention == 0 then
        gone[#gone + 1] = key
      else
        redis.call('HSET', key, 'state', 'completed', 'finished', snow, 'lease', '', 'lease_until', '')
        completed[#completed + 1] = now + retention
        completed[#completed + 1] = id
      end
    elseif outcome == 'retry' then
      local errors = add_error(j, attempt, now, msg)
      if attempt >= tonumber(v[5]) then
        finish(key, id, 'dead', dead, errors)
      else
        again(key, id, v[6], run_at, {'errors', errors})
      end
    elseif outcome == 'snooze' then
      again(key, id, v[6], run_at, {'attempt', int(math.max(attempt - 1, 0))})
    elseif outcome == 'cancel' then
      finish(key, id, 'cancelled', cancelled, add_error(j, attempt, now, msg))
    else -- dead
      finish(key, id, 'dead', dead, add_error(j, attempt, now, msg))
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
wake(flush_available(avail))
return stale
