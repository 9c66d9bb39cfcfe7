-- joblib.lua: definitions shared by every job transition; prepended to each
-- job script when it is compiled. Every job script takes the same first
-- ten KEYS, the keys of one queue Q, all in one hash slot (they share the
-- hash tag {Q}):
--
--   KEYS[1]  M  hash: seq (last arrival number), paused ("1" while paused)
--   KEYS[2]  A  sorted set: available jobs, score = priority * 2^42 + arrival number
--   KEYS[3]  T  sorted set: available jobs again, member "arrival:id" (the
--               arrival number as 13 digits), score = run_at (server ms)
--   KEYS[4]  S  sorted set: scheduled jobs, score = run_at (server ms)
--   KEYS[5]  R  sorted set: running jobs, score = lease_until (server ms)
--   KEYS[6]  C  sorted set: completed jobs, score = when to delete them (server ms)
--   KEYS[7]  D  sorted set: dead jobs, score = finished (server ms)
--   KEYS[8]  X  sorted set: cancelled jobs, score = finished (server ms)
--   KEYS[9]  W  list: wake tokens, one per job made available (JobWait pops them)
--   KEYS[10] J  the prefix of the queue's job keys, "P:queue:{Q}:job:"
--
-- Scripts that know their jobs take the job keys next, KEYS[11] onwards.
--
-- A orders fetches; T orders the available jobs by run_at, then arrival,
-- for JobList and QueueStats (oldest first). Every script that adds to or
-- removes from A does the same to T; a job's member of T follows from its
-- score in A (t_member).
--
-- THE ONE EXCEPTION to "no script builds a key from data": a fetch pops job
-- IDs from A and the sweeps find them in S, R and C, so no caller can name
-- those jobs in advance. Such scripts build a job key as J .. id. J is passed
-- in KEYS, so the slot is declared, and every job key starts with J, so it
-- carries the same hash tag {Q} and lives in the same Cluster slot: the
-- script never leaves the slot it declared. Nothing else is built.
--
-- A job hash holds the fields in F. Times are server ms as decimal strings;
-- a field not yet set (attempted, finished, errors, lease, lease_until) is
-- absent or "". Each job is in exactly one of A (and T), S, R, C, D, X,
-- matching its state; with no retention a completed job is deleted at once.
--
-- Every redis.call costs about a microsecond of the server's single thread;
-- the per-job paths read a job with one HMGET and write it with one HSET,
-- and sorted-set changes are batched per script.
local M, A, T, S, R, C, D, X, W, J = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local FIRST_JOB_KEY = 11

-- The fields of a job, in the order replies carry them (jobFields in
-- jobs.go), and their positions.
local F = {'kind', 'args', 'prio', 'state', 'attempt', 'max', 'tags', 'meta',
  'created', 'run_at', 'attempted', 'finished', 'errors', 'lease', 'lease_until'}
local FI = {kind = 1, args = 2, prio = 3, state = 4, attempt = 5, max = 6, tags = 7, meta = 8,
  created = 9, run_at = 10, attempted = 11, finished = 12, errors = 13, lease = 14, lease_until = 15}

-- Arrival numbers per priority band; doubles are exact integers to 2^53, and
-- priorities 0..9 use scores below 10 * 2^42 < 2^46.
local SPAN = 4398046511104 -- 2^42
-- The most due, expired or swept jobs one fetch handles of each kind.
local BATCH = 100
-- Errors kept per job (batondriver.MaxErrors).
local MAX_ERRORS = 10
-- The length of a lease: 128 random bits in base64url (leaseLen in jobs.go).
local LEASE_LEN = 22
-- Wake tokens: at most this many per transition, and in the list.
local MAX_WAKE, WAKE_LIST = 64, 1000

-- Result codes for requests about one job; mapped to Go errors in jobs.go.
local NOT_FOUND, NOT_RETRYABLE, RUNNING = -1, -2, -3

-- Server time in milliseconds. All time decisions use it.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- An integer as a string. Lua's own conversion keeps only 14 digits.
local function int(n)
  return string.format('%d', n)
end

-- The fields of the job at key, in the order of F (false where absent), or
-- nil if there is no such job. Read a field as v[FI.name].
local function load_job(key)
  local v = redis.call('HMGET', key, unpack(F))
  if not v[FI.state] then return nil end
  return v
end

-- Set fields of job v at key from the list {field, value, ...}, in v and in
-- Redis, with one call.
local function update(key, v, t)
  for i = 1, #t, 2 do v[FI[t[i]]] = t[i + 1] end
  redis.call('HSET', key, unpack(t))
end

-- Append job id and its fields (a nested array) to the reply out.
local function push_job(out, id, v)
  out[#out + 1] = id
  out[#out + 1] = v
end

-- ZADD key with the list {score, member, ...}, in chunks that fit Lua's stack.
local function zadd(key, t)
  for i = 1, #t, 1000 do
    redis.call('ZADD', key, unpack(t, i, math.min(i + 999, #t)))
  end
end

-- Call cmd on key with the list of args, in chunks.
local function chunked(cmd, key, t)
  for i = 1, #t, 1000 do
    redis.call(cmd, key, unpack(t, i, math.min(i + 999, #t)))
  end
end

-- The first of n consecutive arrival numbers. They order jobs within a
-- priority band of A only, so once past 2^41 the count restarts when A is
-- empty; a band overflows only after 2^41 more arrivals while A never
-- empties. Callers add the jobs to A before asking again.
local function next_seqs(n)
  local last = redis.call('HINCRBY', M, 'seq', n)
  if last > SPAN / 2 and redis.call('EXISTS', A) == 0 then
    redis.call('HSET', M, 'seq', n)
    return 1
  end
  return last - n + 1
end

-- Wake up to n waiting fetchers: a token each, LPUSHed to W, which is kept
-- at its newest WAKE_LIST tokens.
local function wake(n)
  n = math.min(n, MAX_WAKE)
  if n <= 0 then return end
  local t = {}
  for i = 1, n do t[i] = '1' end
  if redis.call('LPUSH', W, unpack(t)) > WAKE_LIST then
    redis.call('LTRIM', W, 0, WAKE_LIST - 1)
  end
end

-- The errors JSON of job j with one more entry, keeping the newest
-- MAX_ERRORS. Entries are {attempt, at (server ms), error}.
local function add_error(j, attempt, now, msg)
  local errs = {}
  if j.errors and j.errors ~= '' then errs = cjson.decode(j.errors) end
  errs[#errs + 1] = {attempt = attempt, at = now, error = msg}
  while #errs > MAX_ERRORS do table.remove(errs, 1) end
  return cjson.encode(errs)
end

-- The member of T of job id whose score in A is score.
local function t_member(id, score)
  return string.format('%013d', score % SPAN) .. ':' .. id
end

-- The job ID in member m of T.
local function t_id(m)
  return string.sub(m, 15)
end

-- Jobs made available by one script: make_available collects them (their
-- run_at is already set), and flush_available gives them arrival numbers in
-- collection order, adds them to A and T and returns how many it added.
local function new_batch()
  return {}
end

local function make_available(batch, id, prio, run_at)
  batch[#batch + 1] = id
  batch[#batch + 1] = tonumber(prio)
  batch[#batch + 1] = run_at
end

local function flush_available(batch)
  local n = #batch / 3
  if n == 0 then return 0 end
  local seq = next_seqs(n)
  local a, t = {}, {}
  for i = 1, n do
    local id = batch[3 * i - 2]
    local score = batch[3 * i - 1] * SPAN + seq + i - 1
    a[2 * i - 1] = score
    a[2 * i] = id
    t[2 * i - 1] = batch[3 * i]
    t[2 * i] = t_member(id, score)
  end
  zadd(A, a)
  zadd(T, t)
  return n
end

-- The sorted set that lists the jobs in state, or nil.
local function state_set(state)
  if state == 'available' then return T
  elseif state == 'scheduled' then return S
  elseif state == 'running' then return R
  elseif state == 'completed' then return C
  elseif state == 'dead' then return D
  elseif state == 'cancelled' then return X
  end
  return nil
end
