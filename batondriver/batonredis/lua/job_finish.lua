-- job_finish.lua: record the outcomes of leased attempts.
--
-- KEYS: the queue keys (see joblib.lua), then the record's key if ARGV[7]
-- names one, the lost calls' record keys (ARGV[8]), then the n jobs' keys.
-- This script builds concurrency keys' keys from K: the concurrency keys
-- are stored in the jobs, and it may lease jobs popped from the available
-- lists (see the exception in joblib.lua).
-- ARGV[1] retention of completed jobs in ms (0: delete them at once)
-- ARGV[2] how many available jobs to lease to the caller afterwards (0:
--         none), ARGV[3] their lease TTL in ms, ARGV[4] their leases, as
--         for job_fetch.lua
-- ARGV[5] "1" to chain jobs behind the jobs leased and behind the chained
--         jobs handed a slot here (see lease in joblib.lua), else "0"
-- ARGV[6] the last server time in ms at which the caller still waits for
--         the reply, "0" if it waits for ever: past it, the outcomes are
--         recorded but no job is leased or chained (see job_fetch.lua)
-- ARGV[7] the nonce of this call's record, ARGV[8] the lost calls to
--         settle first, as for job_fetch.lua
-- ARGV[7i+2..7i+8] for the i-th job: ID, lease, outcome (completed, retry,
--   snooze, cancel, dead, again), error, run_at in ms for retry, snooze and
--   again ("0": now; "+d": d ms after now), "1" to unchain the job chained behind it, "2" to give
--   the job back (a snooze until now or earlier: see give_back), else "0",
--   and the output to store (completed and again; "" for none)
--
-- Returns {the number of stale outcomes, their 1-based indexes, the
-- indexes of the lost calls left unsettled (an array), then per job leased
-- its ID and fields (F in joblib.lua)}. A stale outcome's job
-- was not running with that lease, or its lease_until had come: it changes
-- nothing.
--
-- Leasing here hands the workers that just freed up straight to the next
-- jobs — a promoted one among them — without a fetch round trip. Nothing
-- is leased from a paused queue.
--
-- Every outcome clears the lease and first frees the job's key slot,
-- promoting the key's parked jobs into the freed slots (docs/concurrency.md)
-- — unless a job is chained behind it: that job takes over the slot and the
-- lease_until instead, and nothing is promoted; or, asked to unchain it,
-- puts it back at the head of the parked jobs first (see unchain in
-- joblib.lua). A chained job's own outcome, recorded before the outcome of
-- the job ahead, frees no slot; the job ahead's then frees its slot as if
-- nothing were chained, in a later call or later in the same one. A
-- chained job snoozed until now or earlier (given back by a client that
-- will not run it) goes back to the head of its key's parked jobs, as an
-- unchained one does; any other job given back keeps its place (give_back).
-- Then (docs/job-states.md):
--   completed: deleted, or kept in C until now + retention, finished = now;
--   retry:     error recorded; dead if attempt >= max, else scheduled at
--              run_at (admitted at once if run_at is not after now);
--   snooze:    the attempt is given back, no error; scheduled as retry
--              (both take a claim unique while queued back: reclaim);
--   again:     a new run: attempt 0, runs + 1; scheduled or admitted as
--              retry — unless the job is unique while queued and a queued
--              twin holds its unique key, which then is the next run: the
--              job is completed;
--   cancel:    error recorded; cancelled (in X), finished = now;
--   dead:      error recorded; dead (in D), finished = now.
-- A job whose cancel was requested (job_cancel.lua) ends cancelled by any
-- outcome but completed, its error the request's reason followed by the
-- outcome's (cancel_error in joblib.lua); a give-back and a chained job
-- put back unrun are cancelled as give_back and unchain say.
-- A job that ends releases its unique key, as does one unique while
-- running that stops running. A job scheduled here due before every
-- other scheduled job wakes a fetcher (as an insert's does), so that every
-- process waiting on the queue, not only the caller, learns when it is due.
local retention = tonumber(ARGV[1])
local now = now_ms()
local snow = int(now)
local stale, ended, gone = {}, {}, {}
local completed, sched, dead, cancelled = {}, {}, {}, {}
local avail = new_batch()
local rec
if ARGV[7] ~= '' then rec = {KEYS[FIRST_JOB_KEY], ARGV[7]} end
local first = FIRST_JOB_KEY + (rec and 1 or 0)
local unsettled, calls = settle(avail, now, KEYS, first, ARGV[8])
first = first + calls

-- End job id at key in a terminal state, listed in set, with the fields
-- in t besides.
local function finish(key, id, state, set, t)
  put(t, 'state', state, 'finished', snow)
  redis.call('HSET', key, unpack(t))
  set[#set + 1] = now
  set[#set + 1] = id
end

-- Complete job id at key, its lease cleared, kept until now + retention;
-- x lists more fields to write, or is nil. Its fields go to HSET directly:
-- this runs for most outcomes.
local function complete(key, id, x)
  if retention == 0 then
    gone[#gone + 1] = key
    return
  end
  redis.call('HSET', key, 'lease', '', 'lease_until', '', 'state', 'completed', 'finished', snow, unpack(x or {}))
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

-- The chained jobs handed a slot, {id, lease, key, lease_until} each, and
-- their indexes there by ID: one whose own outcome comes later in the call
-- is dropped from it (it no longer runs).
local handed, handed_at = {}, {}

-- The jobs whose outcomes this call recorded, by ID: a completed one may be
-- deleted only at the end, its hash still saying running until then. They
-- leave R at the end too (ended).
local recorded = {}
local function record(id)
  ended[#ended + 1] = id
  recorded[id] = true
end

-- Hand the slot of job id, whose fields (read below) are in v, to the job
-- chained behind it, if any, or unchain that job if back is set; x gets the
-- fields to clear in job id. A chained job whose own outcome came earlier
-- in the call gets neither. Reports whether it handed the slot over.
local function hand_over(id, v, x, back)
  if v[14] and v[14] ~= '' then put(x, 'after', '') end
  local c = v[13]
  if not c or c == '' then return false end
  put(x, 'next', '')
  if recorded[c] then return false end
  if back then
    unchain(c, id, now)
    return false
  end
  local cv = redis.call('HMGET', J .. c, 'state', 'after', 'lease')
  if cv[1] ~= 'running' or cv[2] ~= id then return false end
  local h = K .. v[8] .. ':h'
  redis.call('SREM', h, id)
  redis.call('SADD', h, c)
  handed[#handed + 1] = {c, cv[3], v[8], v[3]}
  handed_at[c] = #handed
  return true
end

for i = 1, #KEYS - first + 1 do
  local key = KEYS[first + i - 1]
  local a = 7 * i + 2
  local id, held, outcome, msg, run_at = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], due_at(ARGV[a + 4], now)
  -- A completion's output (JobFinish.Output). An again's error is
  -- recorded only if a cancel request turns it into a cancel (below).
  local output = ARGV[a + 6]
  local v = redis.call('HMGET', key, unpack(OUTCOME_FIELDS))
  -- A chained job handed a slot earlier in this call holds it now, though
  -- its after still names the job ahead (lease clears it at the end).
  local took_over = handed_at[id] ~= nil
  if took_over then
    handed[handed_at[id]] = false
    handed_at[id] = nil
  end
  -- A second outcome of a job recorded earlier in the call is stale: the
  -- hash of a completed job deleted at the end still says running.
  if v[1] ~= 'running' or v[2] ~= held or tonumber(v[3]) <= now or recorded[id] then
    stale[#stale + 1] = i
  elseif outcome == 'snooze' and run_at <= now and (v[14] or '') ~= '' and not took_over then
    -- A chained job given back before the outcome of the job ahead (its
    -- client will not run it): back to the head of its key's parked jobs,
    -- as if the job ahead unchained it, and promoted at once if a slot
    -- freed while it was chained. Once it took over the slot, it is given
    -- back as any holder: the slot is freed below.
    record(id)
    unchain(id, v[14], now)
    promote(avail, v[8])
  elseif outcome == 'snooze' and run_at <= now and ARGV[a + 5] == '2' then
    record(id)
    local x = {}
    hand_over(id, v, x, true)
    give_back(avail, key, id, v, now, x)
    if v[8] and v[8] ~= '' then promote(avail, v[8]) end -- the job it unchained, as above
  elseif outcome == 'completed' and (v[8] or '') == '' and (v[10] or '') == '' then
    -- Completed with neither concurrency key nor unique key (most
    -- outcomes): no slot to free, no claim to release.
    record(id)
    complete(key, id, output ~= '' and {'output', output} or nil)
  else
    record(id)
    local attempt = tonumber(v[4])
    local u, scope = v[10], v[11]
    local x = {}
    if v[15] and v[15] ~= '' and outcome ~= 'completed' then
      -- A cancel was requested: no outcome but a completion runs the job
      -- again.
      outcome, msg = 'cancel', cancel_error(v[16], msg)
      put(x, 'cancel', '', 'cancel_reason', '')
    elseif output ~= '' then
      put(x, 'output', output) -- a completion's: by complete or again
    end
    if not hand_over(id, v, x, ARGV[a + 5] == '1') then release(avail, id, v[8]) end
    -- The job leaves running: a claim while running ends, and one held
    -- until done ends if this outcome ends the job.
    local ends = not (outcome == 'snooze' or outcome == 'again'
      or (outcome == 'retry' and attempt < tonumber(v[5])))
    if ends or scope == 'running' then unclaim(u, scope, id) end
    local j = {}
    j[FI.prio], j[FI.key], j[FI.limit] = v[6], v[8], v[9]
    local t = {'lease', '', 'lease_until', '', unpack(x)}
    local errors = function() return add_error({errors = v[7]}, attempt, now, msg) end
    if outcome == 'completed' then
      complete(key, id, x)
    elseif outcome == 'retry' then
      put(t, 'errors', errors())
      if attempt >= tonumber(v[5]) then
        finish(key, id, 'dead', dead, t)
      else
        reclaim(u, scope, id, now)
        again(key, id, j, run_at, t)
      end
    elseif outcome == 'snooze' then
      put(t, 'attempt', int(math.max(attempt - 1, 0)))
      reclaim(u, scope, id, now)
      again(key, id, j, run_at, t)
    elseif outcome == 'again' then
      local c = scope == 'queued' and claim_of(u, scope, now)
      local other = c and select(3, claim_parts(c))
      if other and other ~= id and QUEUED[redis.call('HGET', J .. other, 'state')] then
        complete(key, id, x)
      else
        if scope == 'queued' then claim(u, scope, id, 0) end
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
wake(schedule(sched))
zadd(D, dead)
zadd(X, cancelled)
local out = {#stale}
for i = 1, #stale do out[#out + 1] = stale[i] end
out[#out + 1] = unsettled
local still = {}
for _, hd in ipairs(handed) do
  if hd then still[#still + 1] = hd end
end
handed = still
local max, chain = tonumber(ARGV[2]), ARGV[5] == '1'
local waits = tonumber(ARGV[6])
if waits > 0 and now > waits then max, chain = 0, false end
local paused, fence, bands = false, 0, {}
if max > 0 or (chain and #handed > 0) then paused, fence, bands = read_meta(max) end
if paused then max, chain = 0, false end
if max == 0 and #handed == 0 then
  wake(flush_available(avail))
  return out
end
local n, left, made, promoted = lease(out, max, tonumber(ARGV[3]), ARGV[4], now, fence, bands, avail, chain, handed, rec)
if n == max and made > 0 then wake(math.min(made, left)) end
wake(promoted) -- by the chains (see chain_next), after the lease
return out
