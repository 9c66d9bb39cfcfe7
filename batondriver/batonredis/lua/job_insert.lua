-- job_insert.lua: add jobs to the queue, each available now or scheduled.
--
-- KEYS: M A T S R C D X W J (see joblib.lua), then KEYS[11..10+n] the keys of
-- the n new jobs.
-- ARGV: eight per job, in the order of the job keys: id, kind, args,
-- priority, max attempts, tags (JSON or ""), metadata (or ""), run_at (ms;
-- "0" for now). Then, optionally, two more: the name of a recurring
-- schedule and the tick (ms) the insert is for.
--
-- Returns {server ms, then per job 1 if scheduled or 0 if available}, or
-- {server ms, -1} if the schedule's tick was inserted already (M keeps the
-- last tick per schedule, field "once:<name>"). A job whose run_at is not
-- after now is available at once, with run_at = now; one waiting fetcher is
-- woken per available job (at most 64), and one more if a scheduled job is
-- now the queue's earliest.
local now = now_ms()
local njobs = #KEYS - FIRST_JOB_KEY + 1
if #ARGV > njobs * 8 then
  local field, tick = 'once:' .. ARGV[njobs * 8 + 1], tonumber(ARGV[njobs * 8 + 2])
  local last = tonumber(redis.call('HGET', M, field) or '-1')
  if tick <= last then
    return {now, -1}
  end
  redis.call('HSET', M, field, ARGV[njobs * 8 + 2])
end
local snow = int(now)
local out = {now}
local sched, avail = {}, new_batch()
for i = FIRST_JOB_KEY, #KEYS do
  local a = (i - FIRST_JOB_KEY) * 8
  local id, run_at = ARGV[a + 1], tonumber(ARGV[a + 8])
  local state, sat = 'available', snow
  if run_at > now then
    state, sat = 'scheduled', ARGV[a + 8]
    sched[#sched + 1] = run_at
    sched[#sched + 1] = id
    out[#out + 1] = 1
  else
    make_available(avail, id, ARGV[a + 4], now)
    out[#out + 1] = 0
  end
  local t = {'kind', ARGV[a + 2], 'args', ARGV[a + 3], 'prio', ARGV[a + 4],
    'state', state, 'attempt', '0', 'max', ARGV[a + 5], 'created', snow, 'run_at', sat}
  if ARGV[a + 6] ~= '' then
    t[#t + 1] = 'tags'
    t[#t + 1] = ARGV[a + 6]
  end
  if ARGV[a + 7] ~= '' then
    t[#t + 1] = 'meta'
    t[#t + 1] = ARGV[a + 7]
  end
  redis.call('HSET', KEYS[i], unpack(t))
end
-- A job due before every other scheduled one wakes a fetcher too, so that
-- it learns the new earliest run_at instead of sleeping through it.
local woken = 0
if #sched > 0 then
  local first = redis.call('ZRANGE', S, 0, 0, 'WITHSCORES')
  local earliest = math.huge
  for i = 1, #sched, 2 do earliest = math.min(earliest, sched[i]) end
  if #first == 0 or earliest < tonumber(first[2]) then woken = 1 end
end
zadd(S, sched)
wake(flush_available(avail) + woken)
return out
