-- job_insert.lua: add jobs to the queue, in order, each admitted now or
-- scheduled, or resolved to a unique twin.
--
-- KEYS: the queue keys (see joblib.lua), then KEYS[16..15+n] the keys of the
-- n new jobs.
-- ARGV: fifteen per job, in the order of the job keys: id, kind, args,
-- priority, max attempts, tags (JSON or ""), metadata (or ""), run_at (ms;
-- "0" for now; "+d" for d ms after now), concurrency key (or ""), its default limit, on-busy policy,
-- busy delay (ms), unique key (or ""), unique scope, then the unique period
-- (ms) and the conflict answer joined as "period:answer". Then, optionally,
-- two more: the name of a recurring schedule and the tick (ms) the insert is
-- for.
--
-- Returns {server ms, then a code per job, then for each job whose code is
-- DROPPED or a twin code its ID and fields (F in joblib.lua)}, or {server
-- ms, -1, the last tick inserted} if the schedule's tick, or a later one,
-- was inserted already (M keeps the last tick per schedule, field
-- "once:<name>"). Codes: AVAILABLE, SCHEDULED, PARKED,
-- DROPPED, REFUSED (OnBusyFail: nothing stored) from joblib.lua, and
-- DUPLICATE, REPLACED, REJECTED for a unique twin (whose fields follow; the
-- twin of a period claim may be gone: false then), and UNREPLACED for a
-- queued twin that UniqueReplace found of another kind or concurrency key
-- than the insert's: nothing is stored or changed. A job whose run_at is not
-- after now is admitted (docs/concurrency.md) with run_at = now; one waiting
-- fetcher is woken per job made available (at most 64), and one more if a
-- job scheduled or moved here makes the queue's earliest run_at earlier
-- (schedule in joblib.lua).
local DUPLICATE, REPLACED, REJECTED, UNREPLACED = 5, 6, 7, 8
local PER_JOB = 15
local now = now_ms()
local njobs = #KEYS - FIRST_JOB_KEY + 1
if #ARGV > njobs * PER_JOB then
  local field, tick = 'once:' .. ARGV[njobs * PER_JOB + 1], tonumber(ARGV[njobs * PER_JOB + 2])
  local last = tonumber(redis.call('HGET', M, field) or '-1')
  if tick <= last then
    return {now, -1, last}
  end
  redis.call('HSET', M, field, ARGV[njobs * PER_JOB + 2])
end
local snow = int(now)
local out, rows = {now}, {}
-- sched lists {run_at, id, ...} to add to S, or move in S, at the end;
-- pending maps the ID of a job scheduled or moved here to the index of its
-- run_at there.
local sched, pending, avail = {}, {}, new_batch()
for i = FIRST_JOB_KEY, #KEYS do
  local a = (i - FIRST_JOB_KEY) * PER_JOB
  local id, run_at = ARGV[a + 1], due_at(ARGV[a + 8], now)
  local u, scope = ARGV[a + 13], ARGV[a + 14]
  local code
  local twin_id, tv
  if u ~= '' then
    local sep = string.find(ARGV[a + 15], ':', 1, true)
    local period, answer = tonumber(string.sub(ARGV[a + 15], 1, sep - 1)), string.sub(ARGV[a + 15], sep + 1)
    twin_id, tv = twin(u, scope, period, now)
    if twin_id then
      code = DUPLICATE
      if answer == 'reject' then
        code = REJECTED
      elseif answer == 'replace' and tv and QUEUED[tv[FI.state]] and
          (tv[FI.kind] ~= ARGV[a + 2] or (tv[FI.key] or '') ~= ARGV[a + 9]) then
        -- The new args under the twin's kind or key would run another
        -- kind's handler, or run under another key's slots.
        code = UNREPLACED
      elseif answer == 'replace' and tv and QUEUED[tv[FI.state]] then
        code = REPLACED
        local t = {'args', ARGV[a + 3]}
        if run_at > now and tv[FI.state] == 'scheduled' then
          put(t, 'run_at', int(run_at))
          if pending[twin_id] then
            -- Scheduled or moved by this call already: its entry moves.
            sched[pending[twin_id]] = run_at
          else
            -- Moved in S by schedule(), which reads S's head first.
            sched[#sched + 1] = run_at
            sched[#sched + 1] = twin_id
            pending[twin_id] = #sched - 1
          end
        end
        update(J .. twin_id, tv, t)
      end
      rows[#rows + 1] = twin_id
      rows[#rows + 1] = tv or false
    end
  end
  local k = ARGV[a + 9]
  if u == '' and k == '' then
    -- Neither key nor unique key (most jobs): nothing to admit or claim.
    local state, at = 'available', snow
    if run_at > now then
      state, at = 'scheduled', int(run_at)
      sched[#sched + 1] = run_at
      sched[#sched + 1] = id
      code = SCHEDULED
    else
      make_available(avail, id, ARGV[a + 4])
      code = AVAILABLE
    end
    store_plain(KEYS[i], ARGV, a, snow, state, at)
  elseif not code then
    local t = {'kind', ARGV[a + 2], 'args', ARGV[a + 3], 'prio', ARGV[a + 4],
      'attempt', '0', 'max', ARGV[a + 5], 'created', snow}
    if ARGV[a + 6] ~= '' then put(t, 'tags', ARGV[a + 6]) end
    if ARGV[a + 7] ~= '' then put(t, 'meta', ARGV[a + 7]) end
    if k ~= '' then
      put(t, 'key', k, 'limit', ARGV[a + 10], 'onbusy', ARGV[a + 11])
      if ARGV[a + 11] == 'reschedule' then put(t, 'delay', ARGV[a + 12]) end
    end
    if u ~= '' then put(t, 'ukey', u, 'uscope', scope) end
    local v = {}
    v[FI.key], v[FI.limit], v[FI.onbusy], v[FI.delay], v[FI.prio], v[FI.attempt] =
      k, ARGV[a + 10], ARGV[a + 11], ARGV[a + 12], ARGV[a + 4], 0
    local at
    if run_at > now then
      put(t, 'state', 'scheduled', 'run_at', int(run_at))
      code, at = SCHEDULED, run_at
    else
      put(t, 'run_at', snow)
      code, at = admit(avail, t, id, v, now, true, true)
    end
    if code == SCHEDULED then
      sched[#sched + 1] = at
      sched[#sched + 1] = id
      pending[id] = #sched - 1
    end
    if code ~= REFUSED then
      redis.call('HSET', KEYS[i], unpack(t))
      if u ~= '' then
        if scope == 'period' then
          local sep = string.find(ARGV[a + 15], ':', 1, true)
          claim(u, scope, id, now + tonumber(string.sub(ARGV[a + 15], 1, sep - 1)), now)
        elseif scope ~= 'running' and code ~= DROPPED then
          claim(u, scope, id, 0)
        end
      end
      if code == DROPPED then
        rows[#rows + 1] = id
        rows[#rows + 1] = load_job(KEYS[i])
      end
    end
  end
  out[#out + 1] = code
end
wake(flush_available(avail) + schedule(sched))
for i = 1, #rows do out[#out + 1] = rows[i] end
return out
