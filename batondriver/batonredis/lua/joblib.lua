-- joblib.lua: definitions shared by every job transition. The transitions
-- are loaded together with it as one Redis function library (FUNCTION LOAD,
-- called with FCALL), so that these definitions run once at load rather
-- than at every call; where functions are missing (Redis < 7) each
-- transition runs as a script with this file prepended. Either way a
-- transition starts with bind(KEYS). Every job transition but
-- job_insert_one.lua (see bind_one) takes the same first fifteen KEYS, the
-- keys of one queue Q, all in one hash slot (they share the hash tag {Q}):
--
--   KEYS[1]  M  hash: paused ("1" while paused), dropped (jobs ever
--               dropped), once:<name> (schedules' ticks), fence (the last
--               fencing token of any of the queue's keys), a0..a9 (see
--               below); seq only while a version before this one runs
--   KEYS[2]  A  the prefix of the available lists: A .. p, p = 0..9, is the
--               list of the available jobs of priority p, head first
--   KEYS[3]  S  sorted set: scheduled jobs, score = run_at (server ms)
--   KEYS[4]  R  sorted set: running jobs, score = lease_until (server ms)
--   KEYS[5]  C  sorted set: completed jobs, score = when to delete them (server ms)
--   KEYS[6]  D  sorted set: dead jobs, score = finished (server ms)
--   KEYS[7]  X  sorted set: cancelled jobs, score = finished (server ms)
--   KEYS[8]  W  list: wake tokens, one per job made available (JobWait pops them)
--   KEYS[9]  J  the prefix of the queue's job keys, "P:queue:{Q}:job:"
--   KEYS[10] K  the prefix of the queue's concurrency keys' keys, "P:queue:{Q}:key:"
--   KEYS[11] KI sorted set: active concurrency keys, score = -(parked count)
--   KEYS[12] PK sorted set: parked jobs, score = parked_at (server ms)
--   KEYS[13] Y  sorted set: dropped jobs, score = finished (server ms)
--   KEYS[14] U  hash: class:unique key -> claim "0:id", or "expiry:at:id"
--               for period claims (see "Uniqueness claims" below)
--   KEYS[15] UP sorted set: U's fields of period claims, score = expiry
--
-- Scripts that know their jobs take the job keys next, KEYS[16] onwards.
--
-- The available lists order fetches (priority, then arrival), and JobList
-- lists available jobs in the same order. A job made available is pushed
-- at the tail of its priority's list, so within a priority the order is
-- when the jobs became available: pushing costs O(1), as asynq's LPUSH
-- does, where the sorted set of earlier versions cost a ZADD and an
-- arrival number's HINCRBY per call (docs/benchmarks.md). M's field
-- "a" .. p is set while list A .. p may hold jobs: a push that starts the
-- list sets it, and a fetch that drains it clears it, so that a fetch
-- learns from the read of M it makes anyway which lists to pop. (Set with
-- the list empty is harmless: a job deleted from the middle of a list,
-- by LREM, leaves the field alone.)
--
-- A concurrency key k of the queue (docs/concurrency.md) has three keys:
--   K .. k .. ':h'  set: its holders, the IDs of its available and running jobs
--   K .. k .. ':p'  list: its parked job IDs, head first
--   K .. k .. ':m'  hash: def (default limit), limit (override), mixed (see
--                   promote)
-- The first two vanish when empty; k is in KI while it has holders, parked
-- jobs or an override, and when it leaves KI (goes idle) its meta is deleted
-- too: an idle key keeps nothing. Its fences come from the queue's (M's
-- fence), so they keep rising across the key's idle spells.
--
-- THE ONE EXCEPTION to "no script builds a key from data": a fetch pops job
-- IDs from the available lists and the sweeps find them in S, R and C, and
-- a chained job and the job ahead of it name each other in their hashes
-- (next, after), so no caller can name those jobs, nor the concurrency
-- keys stored in them, in advance. Such scripts build a job key as J .. id
-- and a concurrency key's keys as K .. k .. suffix; an available list is A
-- .. p, as a job's priority picks it, and the sorted set of earlier
-- versions (LEGACY below) is A without its last ":". J, K and A are passed
-- in KEYS, so the slot is declared, and every key built starts with one of
-- them (or, LEGACY, with A's own text), so it carries the same hash tag
-- {Q} and lives in the same Cluster slot: the script never leaves the slot
-- it declared. Nothing else is built.
--
-- A job hash holds the fields in F, next (the ID of the job chained
-- behind it, see chain_next; stale once that job's after no longer names
-- it) and, with a cancel request, cancel_reason (see cancel_end). Times
-- are server ms as decimal strings; a field not yet set is absent or "".
-- Each job is in exactly one of the available lists, S, R,
-- C, D, X, PK, Y, matching its state; with no retention a completed job is
-- deleted at once.
--
-- Every redis.call costs one to two and a half microseconds of the server's
-- single thread (docs/benchmarks.md), most of it the crossing between Lua
-- and Redis rather than the command: the per-job paths read a job with one
-- HMGET and write it with one HSET, and sorted-set changes are batched per
-- script.
local M, A, S, R, C, D, X, W, J
local K, KI, PK, Y, U, UP
local FIRST_JOB_KEY = 16

-- bind sets the queue keys above from the KEYS of the call. Redis runs one
-- call at a time, so the library's shared locals are the call's own.
local function bind(keys)
  M, A, S, R, C, D, X, W, J = keys[1], keys[2], keys[3], keys[4], keys[5], keys[6], keys[7], keys[8], keys[9]
  K, KI, PK, Y, U, UP = keys[10], keys[11], keys[12], keys[13], keys[14], keys[15]
end

-- bind_one sets the keys of a call of job_insert_one.lua, which takes only
-- M, A and W (then its job's key), and leaves the other queue keys unset,
-- so that a use of one fails instead of touching the wrong key.
local function bind_one(keys)
  M, A, W = keys[1], keys[2], keys[3]
  S, R, C, D, X, J, K, KI, PK, Y, U, UP = nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil
end

-- The fields of a job, in the order replies carry them (jobFields in
-- jobs.go), and their positions.
local F = {'kind', 'args', 'prio', 'state', 'attempt', 'max', 'tags', 'meta',
  'created', 'run_at', 'attempted', 'finished', 'errors', 'lease', 'lease_until',
  'key', 'limit', 'onbusy', 'delay', 'fence', 'ukey', 'uscope', 'runs', 'parked', 'after', 'cancel'}
local FI = {kind = 1, args = 2, prio = 3, state = 4, attempt = 5, max = 6, tags = 7, meta = 8,
  created = 9, run_at = 10, attempted = 11, finished = 12, errors = 13, lease = 14, lease_until = 15,
  key = 16, limit = 17, onbusy = 18, delay = 19, fence = 20, ukey = 21, uscope = 22, runs = 23, parked = 24,
  after = 25, cancel = 26}

-- Priorities are 0..MAX_PRIORITY (batondriver.MaxPriority), 0 the most
-- urgent: one available list each, flagged in M by BAND_FIELDS[p + 1].
local MAX_PRIORITY = 9
local BAND_FIELDS = {}
for p = 0, MAX_PRIORITY do BAND_FIELDS[p + 1] = 'a' .. p end
-- The most due, expired or swept jobs one fetch handles of each kind.
local BATCH = 100
-- Errors kept per job (batondriver.MaxErrors).
local MAX_ERRORS = 10
-- The length of a lease: 128 random bits in base64url (leaseLen in jobs.go).
local LEASE_LEN = 22
-- Wake tokens: at most this many per transition, and in the list.
local MAX_WAKE, WAKE_LIST = 64, 1000

-- Result codes for requests about one job; mapped to Go errors in jobs.go.
local NOT_FOUND, NOT_RETRYABLE, RUNNING, NOT_CANCELLABLE = -1, -2, -3, -4

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

-- Set fields of job v at key from the list {field, value, ...}, in v (those
-- of F) and in Redis, with one call.
local function update(key, v, t)
  for i = 1, #t, 2 do
    if FI[t[i]] then v[FI[t[i]]] = t[i + 1] end
  end
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

-- Add the jobs of sched, {run_at, id, ...}, to S, or move them there (a
-- job in S already: a debounce), each id once. Returns 1 if the queue's
-- earliest run_at is now before the one it had (S's head before the call
-- changes S), or S had none, else 0: such a job wakes a fetcher, so that
-- every process waiting on the queue learns the new earliest run_at
-- instead of sleeping through it, not only the caller. A job due at the
-- earliest's very run_at, or the earliest job moved later, changes nothing
-- a fetcher must learn: it wakes nobody. (job_fetch.lua applies the same
-- rule to the jobs it schedules.)
local function schedule(sched)
  if #sched == 0 then return 0 end
  local first = redis.call('ZRANGE', S, 0, 0, 'WITHSCORES')
  local earliest = math.huge
  for i = 1, #sched, 2 do earliest = math.min(earliest, sched[i]) end
  zadd(S, sched)
  if #first == 0 or earliest < tonumber(first[2]) then return 1 end
  return 0
end

-- Call cmd on key with the list of args, in chunks.
local function chunked(cmd, key, t)
  for i = 1, #t, 1000 do
    redis.call(cmd, key, unpack(t, i, math.min(i + 999, #t)))
  end
end

-- Push ids onto the available list of priority p, at its tail, or at its
-- head if front (then ids[1] ends up first), and flag the list in M if the
-- push started it.
local function push_band(p, ids, front)
  local n = #ids
  if n == 0 then return end
  local cmd = 'RPUSH'
  if front then
    -- LPUSH puts each argument at the head in turn: reversed, ids keep
    -- their order.
    local rev = {}
    for i = n, 1, -1 do rev[#rev + 1] = ids[i] end
    ids, cmd = rev, 'LPUSH'
  end
  local len
  for i = 1, n, 1000 do
    len = redis.call(cmd, A .. p, unpack(ids, i, math.min(i + 999, n)))
  end
  if len == n then redis.call('HSET', M, BAND_FIELDS[p + 1], '1') end
end

-- The priorities whose available lists are flagged in M, ascending, given
-- the values of BAND_FIELDS read from M from index i of mv on.
local function flagged(mv, i)
  local bands = {}
  for p = 0, MAX_PRIORITY do
    if mv[i + p] then bands[#bands + 1] = p end
  end
  return bands
end

-- The priorities whose available lists may hold jobs, ascending.
local function available_bands()
  return flagged(redis.call('HMGET', M, unpack(BAND_FIELDS)), 1)
end

-- How many jobs the available lists of bands hold.
local function available_count(bands)
  local n = 0
  for _, p in ipairs(bands) do n = n + redis.call('LLEN', A .. p) end
  return n
end

-- LEGACY: versions before this one kept the available jobs in one sorted
-- set, A without its last ":", scored priority * 2^42 + an arrival number
-- counted in M's seq, which only they write. While seq is set a fetch
-- first moves up to LEGACY_BATCH of that set's jobs (one more than it
-- leases, if that is more: see read_meta), the most urgent and oldest
-- first, to the tails of their lists (migrate), and deletes seq once the
-- set is empty, so that jobs queued by an older version are neither lost
-- nor stranded after an upgrade, and processes of both versions may share
-- a queue while one replaces the other (docs/redis-keys.md, "Upgrading").
-- Their order among themselves is kept; a job this version made available
-- before they moved is fetched before them. Until they move, job_stats.lua
-- counts them and job_list.lua lists them in that order: after the listed
-- jobs of their priority.
local LEGACY_SPAN, LEGACY_BATCH = 4398046511104, 1000

-- The sorted set of earlier versions (LEGACY).
local function legacy_set()
  return string.sub(A, 1, -2)
end

-- The priority of a job in the LEGACY set, from its score.
local function legacy_priority(score)
  return math.floor(tonumber(score) / LEGACY_SPAN)
end

-- The scores of priority p in the LEGACY set, as the bounds of a ZCOUNT
-- or a ZRANGE BYSCORE: from (inclusive), to (exclusive).
local function legacy_band(p)
  return int(p * LEGACY_SPAN), '(' .. int((p + 1) * LEGACY_SPAN)
end

local function migrate(n)
  local legacy = legacy_set()
  local old = redis.call('ZRANGE', legacy, 0, n - 1, 'WITHSCORES')
  local by, ids = {}, {}
  for i = 1, #old, 2 do
    local p = legacy_priority(old[i + 1])
    if not by[p] then by[p] = {} end
    by[p][#by[p] + 1] = old[i]
    ids[#ids + 1] = old[i]
  end
  for p = 0, MAX_PRIORITY do
    if by[p] then push_band(p, by[p]) end
  end
  if #ids > 0 then chunked('ZREM', legacy, ids) end
  if #old / 2 < n then redis.call('HDEL', M, 'seq') end
end

-- M's fields that the leasing scripts read: paused, fence, seq (LEGACY),
-- then BAND_FIELDS.
local META_FIELDS = {'paused', 'fence', 'seq'}
for p = 0, MAX_PRIORITY do META_FIELDS[#META_FIELDS + 1] = BAND_FIELDS[p + 1] end

-- The queue's paused flag (true while paused), its last fence (0 if none)
-- and the priorities whose available lists may hold jobs, ascending, from
-- one read of M (two after a migration), for a caller that leases up to
-- max jobs. A migration moves more than max jobs, so that the lease takes
-- none behind a legacy one and, if the set still holds jobs, finds more
-- left in the lists.
local function read_meta(max)
  local mv = redis.call('HMGET', M, unpack(META_FIELDS))
  if mv[3] then
    migrate(math.max(LEGACY_BATCH, max + 1))
    mv = redis.call('HMGET', M, unpack(META_FIELDS))
  end
  return mv[1] == '1', tonumber(mv[2]) or 0, flagged(mv, 4)
end

-- Store a job with neither concurrency key nor unique key at key: its
-- fields from argv, offset a (id, kind, args, priority, max attempts, tags
-- or "", metadata or "": job_insert.lua's order), created at screated, in
-- state with run_at at. The fields go to HSET directly, without a table
-- and unpack: for the most common job those cost more than the command.
local function hset_plain(key, argv, a, screated, state, at, ...)
  redis.call('HSET', key, 'kind', argv[a + 2], 'args', argv[a + 3], 'prio', argv[a + 4],
    'attempt', '0', 'max', argv[a + 5], 'created', screated, 'state', state, 'run_at', at, ...)
end

local function store_plain(key, argv, a, screated, state, at)
  local tags, meta = argv[a + 6], argv[a + 7]
  if tags == '' and meta == '' then
    -- The most common job, without hset_plain's vararg call: about 1 µs
    -- of the server's time less (docs/benchmarks.md).
    redis.call('HSET', key, 'kind', argv[a + 2], 'args', argv[a + 3], 'prio', argv[a + 4],
      'attempt', '0', 'max', argv[a + 5], 'created', screated, 'state', state, 'run_at', at)
  elseif tags ~= '' and meta ~= '' then
    hset_plain(key, argv, a, screated, state, at, 'tags', tags, 'meta', meta)
  elseif tags ~= '' then
    hset_plain(key, argv, a, screated, state, at, 'tags', tags)
  else
    hset_plain(key, argv, a, screated, state, at, 'meta', meta)
  end
end

-- Wake up to n waiting fetchers: a token each, LPUSHed to W. When W grows
-- past WAKE_LIST tokens (nobody popped them: every worker is busy) it is
-- cut to half that, so that a steady stream of inserts trims it rarely.
local function wake(n)
  n = math.min(n, MAX_WAKE)
  if n <= 0 then return end
  local len
  if n == 1 then
    len = redis.call('LPUSH', W, '1')
  else
    local t = {}
    for i = 1, n do t[i] = '1' end
    len = redis.call('LPUSH', W, unpack(t))
  end
  if len > WAKE_LIST then
    redis.call('LTRIM', W, 0, WAKE_LIST / 2 - 1)
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

-- Quoting as Go's %q (strconv.Quote) quotes, for the messages that name a
-- key, so that they read the same on every backend: ", \ and the ASCII
-- controls escaped (\a \b \f \n \r \t \v, else \xHH), a byte that does not
-- start a valid UTF-8 sequence as \xHH, the valid runes Go does not print
-- (NOT_PRINT) as \uHHHH or \UHHHHHHHH, and every other rune as it is.
-- NOT_PRINT, pairs of first and last, are the assigned runes that are not
-- graphic as of Go's Unicode 15 tables: C1 controls, spaces but ASCII's,
-- format characters and private use. Unassigned runes, which Go escapes
-- too, are kept as they are.
local NOT_PRINT = {0x80, 0xa0, 0xad, 0xad, 0x600, 0x605, 0x61c, 0x61c, 0x6dd, 0x6dd,
  0x70f, 0x70f, 0x890, 0x891, 0x8e2, 0x8e2, 0x1680, 0x1680, 0x180e, 0x180e,
  0x2000, 0x200f, 0x2028, 0x202f, 0x205f, 0x2064, 0x2066, 0x206f, 0x3000, 0x3000,
  0xe000, 0xf8ff, 0xfeff, 0xfeff, 0xfff9, 0xfffb, 0x110bd, 0x110bd, 0x110cd, 0x110cd,
  0x13430, 0x1343f, 0x1bca0, 0x1bca3, 0x1d173, 0x1d17a, 0xe0001, 0xe0001, 0xe0020, 0xe007f,
  0xf0000, 0xffffd, 0x100000, 0x10fffd}
local QUOTE_ESC = {[7] = '\\a', [8] = '\\b', [9] = '\\t', [10] = '\\n', [11] = '\\v',
  [12] = '\\f', [13] = '\\r', [34] = '\\"', [92] = '\\\\'}

-- The rune of the valid UTF-8 sequence at byte i of s (Go's rules: no
-- overlong forms, surrogates or runes past U+10FFFF) and its length, or
-- nil.
local function utf8_at(s, i)
  local b0, b1, b2, b3 = string.byte(s, i, i + 3)
  local function cont(b) return b and b >= 0x80 and b <= 0xbf end
  if b0 >= 0xc2 and b0 <= 0xdf then
    if cont(b1) then return (b0 - 0xc0) * 64 + (b1 - 0x80), 2 end
  elseif b0 >= 0xe0 and b0 <= 0xef then
    local lo, hi = 0x80, 0xbf
    if b0 == 0xe0 then lo = 0xa0 elseif b0 == 0xed then hi = 0x9f end
    if b1 and b1 >= lo and b1 <= hi and cont(b2) then
      return (b0 - 0xe0) * 4096 + (b1 - 0x80) * 64 + (b2 - 0x80), 3
    end
  elseif b0 >= 0xf0 and b0 <= 0xf4 then
    local lo, hi = 0x80, 0xbf
    if b0 == 0xf0 then lo = 0x90 elseif b0 == 0xf4 then hi = 0x8f end
    if b1 and b1 >= lo and b1 <= hi and cont(b2) and cont(b3) then
      return (b0 - 0xf0) * 262144 + (b1 - 0x80) * 4096 + (b2 - 0x80) * 64 + (b3 - 0x80), 4
    end
  end
  return nil
end

local function go_quote(s)
  local out, i, n = {'"'}, 1, #s
  while i <= n do
    local b = string.byte(s, i)
    local w = 1
    if b < 0x80 then
      if QUOTE_ESC[b] then
        out[#out + 1] = QUOTE_ESC[b]
      elseif b < 0x20 or b == 0x7f then
        out[#out + 1] = string.format('\\x%02x', b)
      else
        out[#out + 1] = string.char(b)
      end
    else
      local r, len = utf8_at(s, i)
      if not r then
        out[#out + 1] = string.format('\\x%02x', b)
      else
        w = len
        local shown = true
        for k = 1, #NOT_PRINT, 2 do
          if r >= NOT_PRINT[k] and r <= NOT_PRINT[k + 1] then
            shown = false
            break
          end
        end
        if shown then
          out[#out + 1] = string.sub(s, i, i + len - 1)
        elseif r < 0x10000 then
          out[#out + 1] = string.format('\\u%04x', r)
        else
          out[#out + 1] = string.format('\\U%08x', r)
        end
      end
    end
    i = i + w
  end
  out[#out + 1] = '"'
  return table.concat(out)
end

-- Jobs made available by one script: make_available collects them, and
-- flush_available pushes them onto their available lists in collection
-- order and returns how many it pushed and the set of priorities it pushed
-- to. A script that leases afterwards passes the batch to lease instead,
-- which may lease some of its jobs straight away, in the order the lists
-- would have given them, and flushes the rest: a job leased so never
-- enters a list. The batch also collects the jobs that left a key's parked
-- list (promoted or gone), which flush_available takes out of PK, and the
-- promoted jobs whose state is still "parked" in their hash:
-- flush_available writes "available" into those it pushes, and lease
-- writes "running" into those it leases, so that a promoted job is written
-- once.
local function new_batch()
  return {unparked = {}, unwritten = {}}
end

local function make_available(batch, id, prio)
  batch[#batch + 1] = tonumber(prio)
  batch[#batch + 1] = id
end

-- Flush the batch's jobs but those whose index (1-based, in collection
-- order) is in taken, a set, or nil for none.
local function flush_available(batch, taken)
  if #batch.unparked > 0 then chunked('ZREM', PK, batch.unparked) end
  local by, n = {}, 0
  for i = 1, #batch / 2 do
    if not (taken and taken[i]) then
      local p, id = batch[2 * i - 1], batch[2 * i]
      if not by[p] then by[p] = {} end
      by[p][#by[p] + 1] = id
      n = n + 1
      if batch.unwritten[id] then redis.call('HSET', J .. id, 'state', 'available') end
    end
  end
  for p = 0, MAX_PRIORITY do
    if by[p] then push_band(p, by[p]) end
  end
  return n, by
end

-- The sorted set that lists the jobs in state, or nil; available jobs are
-- in lists instead (A .. priority).
local function state_set(state)
  if state == 'scheduled' then return S
  elseif state == 'running' then return R
  elseif state == 'completed' then return C
  elseif state == 'dead' then return D
  elseif state == 'cancelled' then return X
  elseif state == 'parked' then return PK
  elseif state == 'dropped' then return Y
  end
  return nil
end

-- Concurrency keys (docs/concurrency.md). A job holds a slot of its key from
-- admission (available) until it leaves running; admit, release and promote
-- below change a key's holders and parked jobs, and besides them only
-- job_delete.lua (a parked job deleted) and key_setlimit.lua (holders
-- moved back to parked by a lowered limit).

-- What admit did with a job; the insert script replies with these codes.
local AVAILABLE, SCHEDULED, PARKED, DROPPED, REFUSED = 0, 1, 2, 3, 4

-- The keys of concurrency key k: holders, parked, meta.
local function key_keys(k)
  return K .. k .. ':h', K .. k .. ':p', K .. k .. ':m'
end

-- Append the arguments to the list t (of {field, value} pairs).
local function put(t, ...)
  local n = #t
  for i = 1, select('#', ...) do t[n + i] = select(i, ...) end
end

-- Admit job id, whose fields are in v, to be available now: it joins the
-- batch and holds a slot of its key if the key has a free slot and nobody
-- parked; otherwise, if first (its on-busy policy applies) the
-- policy decides, else it is parked. Fields to write to the job are added
-- to t; the caller writes them with its own HSET. insert says whether the
-- caller is an insert, for which OnBusyFail refuses; later it drops.
-- Returns the code of what happened and, for SCHEDULED, when the job runs.
local function admit(batch, t, id, v, now, first, insert)
  local k = v[FI.key]
  if not k or k == '' then
    put(t, 'state', 'available')
    make_available(batch, id, v[FI.prio])
    return AVAILABLE
  end
  local h, p, m = key_keys(k)
  local mv = redis.call('HMGET', m, 'limit', 'def')
  local def = v[FI.limit]
  local limit = tonumber(mv[1] or def)
  local np = redis.call('LLEN', p)
  local nh = redis.call('SCARD', h)
  local policy = v[FI.onbusy]
  local code
  if nh < limit and np == 0 then
    redis.call('SADD', h, id)
    if nh == 0 then redis.call('ZADD', KI, 0, k) end
    put(t, 'state', 'available')
    make_available(batch, id, v[FI.prio])
    code = AVAILABLE
  elseif not first or policy == 'wait' then
    redis.call('RPUSH', p, id)
    redis.call('ZADD', PK, now, id)
    redis.call('ZADD', KI, -(np + 1), k)
    put(t, 'state', 'parked', 'parked', int(now))
    code = PARKED
  elseif policy == 'reschedule' then
    local at = now + tonumber(v[FI.delay])
    put(t, 'state', 'scheduled', 'run_at', int(at))
    return SCHEDULED, at
  elseif policy == 'fail' and insert then
    return REFUSED
  else -- drop, or fail when due
    local msg = string.format('key %s busy: %d holding, limit %d', go_quote(k), nh, limit)
    put(t, 'state', 'dropped', 'finished', int(now),
      'errors', add_error({errors = v[FI.errors]}, tonumber(v[FI.attempt]) or 0, now, msg))
    redis.call('ZADD', Y, now, id)
    redis.call('HINCRBY', M, 'dropped', 1)
    return DROPPED
  end
  if policy ~= 'wait' then put(t, 'onbusy', 'wait') end
  if mv[2] ~= def then
    -- A new default while jobs are parked: they may have the old one.
    if np > 0 then
      redis.call('HSET', m, 'def', def, 'mixed', '1')
    else
      redis.call('HSET', m, 'def', def)
    end
  end
  return code
end

-- Promote parked jobs of key k into the batch while it has free slots,
-- head first, each under the key's override or else its own default limit,
-- and keep KI up to date. Returns how many were promoted.
--
-- Unless the key's meta has "mixed" set, every parked job's default is the
-- key's def: admit sets "mixed" when def changes while jobs are parked,
-- key_setlimit.lua when it demotes holders, unchain when it parks a job of
-- another default again, and it is cleared here once the
-- parked list drains. Then, or under an override, the free slots' worth of
-- jobs is popped at once; else the head is peeked at first, as its limit
-- decides.
local function promote(batch, k)
  local h, p, m = key_keys(k)
  local mv = redis.call('HMGET', m, 'limit', 'def', 'mixed')
  local override = tonumber(mv[1])
  local nh = redis.call('SCARD', h)
  local promoted, gone = {}, 0 -- gone: left the list but not parked (deleted)
  local drained = false -- the parked list was seen empty
  -- Promote id, popped from the list, if it is still parked.
  local function take(id)
    local v = redis.call('HMGET', J .. id, 'prio', 'state')
    if v[2] == 'parked' then
      batch.unwritten[id] = true
      make_available(batch, id, v[1])
      promoted[#promoted + 1] = id
      nh = nh + 1
    else
      gone = gone + 1
    end
    batch.unparked[#batch.unparked + 1] = id
  end
  if mv[3] and not override then
    while true do
      local head = redis.call('LINDEX', p, 0)
      if not head then
        drained = true
        break
      end
      local v = redis.call('HMGET', J .. head, 'limit', 'state')
      if v[2] == 'parked' and nh >= tonumber(v[1]) then break end
      redis.call('LPOP', p)
      take(head)
    end
  else
    local limit = override or tonumber(mv[2]) or 0
    while nh < limit do
      local want = limit - nh
      local ids = redis.call('LPOP', p, want)
      if not ids then
        drained = true
        break
      end
      for _, id in ipairs(ids) do take(id) end
      if #ids < want then
        drained = true
        break
      end
    end
  end
  -- KI's score is minus the parked count: it falls by as many as left the
  -- list. A key with nothing parked, no holder and no override is idle: it
  -- leaves KI and its meta goes (with no holder, the loops above ran only
  -- without a default limit).
  if not drained and nh == 0 and not override then drained = redis.call('LLEN', p) == 0 end
  local left = #promoted + gone
  if #promoted > 0 then chunked('SADD', h, promoted) end
  if drained and nh == 0 and not override then
    redis.call('ZREM', KI, k)
    redis.call('DEL', m)
    return 0
  end
  if left > 0 then redis.call('ZINCRBY', KI, left, k) end
  if drained and mv[3] then redis.call('HDEL', m, 'mixed') end
  return #promoted
end

-- Free job id's slot of key k ("" or false: none) and promote. A job that
-- holds no slot (a chained job, see chain_next) frees none.
local function release(batch, id, k)
  if not k or k == '' then return end
  if redis.call('SREM', K .. k .. ':h', id) == 1 then promote(batch, k) end
end

-- Take job id, not running, out of state, its key k and priority prio
-- (from its hash): an available job leaves its list by LREM (which reads
-- the list up to it), freeing its key's slot; a parked one leaves its
-- key's parked list; either promotes the key's parked jobs into batch.
-- The caller writes the job's new state, or deletes it.
local function unqueue(batch, id, state, k, prio)
  if state == 'available' then
    -- LEGACY: one an older version left in its sorted set is there until a
    -- fetch moves it.
    if redis.call('LREM', A .. prio, 1, id) == 0 then redis.call('ZREM', legacy_set(), id) end
    release(batch, id, k)
    return
  end
  redis.call('ZREM', state_set(state), id)
  if state == 'parked' then
    redis.call('LREM', K .. k .. ':p', 1, id)
    redis.call('ZINCRBY', KI, 1, k) -- one fewer parked
    promote(batch, k)
  end
end

-- The server ms that a run_at argument names: "+d" is d ms after now (a
-- delay counted on the server's clock), anything else ms since the epoch
-- ("0": now).
local function due_at(arg, now)
  if string.byte(arg, 1) == 43 then return now + tonumber(string.sub(arg, 2)) end
  return tonumber(arg)
end

-- Uniqueness claims. A job claims its unique key under the class of its
-- scope, in U's field CLASS .. ':' .. key: q while a job unique while
-- queued is queued, r while a job unique while running runs, d while a job
-- unique until done is queued or running, p for a UniquePeriod job until its
-- period lapses. Classes keep a claim of one scope from taking the place of
-- another's: each conflicts with the inserts whose scope meets its holder's
-- state (twin). The value is "0:id", or for p "expiry:at:id", at being when
-- the claim was made (server ms). A version before classes kept one claim
-- per key in the bare key's field, "0:id" or "expiry:id" or "expiry:at:id";
-- inserts still honour such a claim while its job holds it (twin).
local CLASS = {queued = 'q', running = 'r', until_done = 'd', period = 'p'}

-- The field of U that holds the claim of unique key u in scope's class.
local function claim_field(u, scope)
  return CLASS[scope] .. ':' .. u
end

-- Claim unique key u in scope's class for job id: until released, or for a
-- period claim (expiry > 0) made at server ms at, until expiry.
local function claim(u, scope, id, expiry, at)
  local f = claim_field(u, scope)
  if expiry > 0 then
    redis.call('HSET', U, f, int(expiry) .. ':' .. int(at) .. ':' .. id)
    redis.call('ZADD', UP, expiry, f)
  else
    redis.call('HSET', U, f, '0:' .. id)
  end
end

-- Release job id's claim of unique key u in scope's class, if it holds one
-- and it is not a period's.
local function unclaim(u, scope, id)
  if not u or u == '' or not CLASS[scope] or scope == 'period' then return end
  local f = claim_field(u, scope)
  if redis.call('HGET', U, f) == '0:' .. id then redis.call('HDEL', U, f) end
end

-- The parts of claim c: its expiry (0 if none), when it was made (nil but
-- for a period claim that says) and the claiming job's ID.
local function claim_parts(c)
  local i = string.find(c, ':', 1, true)
  local expiry, rest = tonumber(string.sub(c, 1, i - 1)), string.sub(c, i + 1)
  if expiry > 0 then
    local k = string.find(rest, ':', 1, true)
    if k then return expiry, tonumber(string.sub(rest, 1, k - 1)), string.sub(rest, k + 1) end
  end
  return expiry, nil, rest
end

-- Whether claim c of field f of U has lapsed at server ms now: a period
-- claim past its expiry, deleted here though a fetch has not swept it yet.
local function lapsed(f, c, now)
  local expiry = tonumber(string.sub(c, 1, string.find(c, ':', 1, true) - 1))
  if expiry > 0 and expiry <= now then
    redis.call('HDEL', U, f)
    redis.call('ZREM', UP, f)
    return true
  end
  return false
end

-- The claim of unique key u in scope's class at server ms now, or nil.
local function claim_of(u, scope, now)
  local f = claim_field(u, scope)
  local c = redis.call('HGET', U, f)
  if not c or lapsed(f, c, now) then return nil end
  return c
end

-- Job id, unique (key u) with scope, is queued again after it started (a
-- retry, a snooze, a lease taken back, a give-back) at server ms now: a
-- claim while running ends, and a claim while queued, given up when it
-- started, is taken back unless a twin holds it.
local function reclaim(u, scope, id, now)
  if scope == 'running' then
    unclaim(u, scope, id)
  elseif scope == 'queued' and u and u ~= '' and not claim_of(u, scope, now) then
    claim(u, scope, id, 0)
  end
end

local QUEUED = {scheduled = true, parked = true, available = true}

-- Whether a job in state st is in the states of scope (not period's).
local function in_scope(st, scope)
  if scope == 'queued' then return QUEUED[st] == true end
  if scope == 'running' then return st == 'running' end
  if scope == 'until_done' then return QUEUED[st] == true or st == 'running' end
  return false
end

-- The classes of claims an insert reads, in the order it prefers a twin
-- among queued ones (UniqueReplace), then among others; after them, the
-- bare key of a claim stored before classes.
local TWIN_SCOPES = {'queued', 'until_done', 'period', 'running'}

-- The twin an insert of unique key u with scope (and period, ms) conflicts
-- with: its ID and fields, or nil. Every class of claim on u is read: a
-- twin conflicts if it is in the insert's scope's states (for UniquePeriod:
-- if it was inserted less than period ago) and holds its claim — a period
-- claim until it lapses, whatever became of its job; any other while its
-- job has the key and is in its own scope's states, which a claim released
-- in the step that takes its job out of them always is, but a claim stored
-- before classes may not be. Of several twins, a queued one is returned
-- (for UniqueReplace), else the first in TWIN_SCOPES order.
local function twin(u, scope, period, now)
  local cs = redis.call('HMGET', U, claim_field(u, 'queued'), claim_field(u, 'until_done'),
    claim_field(u, 'period'), claim_field(u, 'running'), u)
  local first_id, first_v -- the first twin found, if none is queued
  for i = 1, #TWIN_SCOPES + 1 do
    local c, class = cs[i], TWIN_SCOPES[i]
    if c and not lapsed(class and claim_field(u, class) or u, c, now) then
      local expiry, at, id = claim_parts(c)
      local v = load_job(J .. id)
      local conflict = false
      if expiry > 0 then
        if scope == 'period' then
          -- Made less than this insert's period ago (a period claim that
          -- does not say when it was made conflicts while it lasts), by a
          -- job of u if it is still there: the bare field of a key p:x is
          -- also the field of x's period claim.
          conflict = (not v or v[FI.ukey] == u) and (not at or at + period > now)
        else
          conflict = v and v[FI.ukey] == u and in_scope(v[FI.state], scope)
        end
      elseif v and v[FI.ukey] == u and in_scope(v[FI.state], class or v[FI.uscope]) then
        if scope == 'period' then
          conflict = tonumber(v[FI.created]) + period > now
        else
          conflict = in_scope(v[FI.state], scope)
        end
      end
      if conflict then
        if v and QUEUED[v[FI.state]] then return id, v end
        if not first_id then first_id, first_v = id, v end
      end
    end
  end
  return first_id, first_v
end

-- The state of concurrency key k: {active (0|1), limit (-1 if unknown),
-- override (0|1), holding, running, parked, the head parked job's parked
-- time or false, the highest fence of a running holder or a job chained
-- behind one (0 if none), chained, then, if holders, per holder {id,
-- state, fence, lease_until, next}}. Holders are read one by one to count
-- the running ones: there are at most about the key's limit of them.
--
-- chained counts the jobs chained behind the holders (chain_next below):
-- a running holder's next names one while that job is running with after
-- = the holder, and next is "" otherwise. A holder's next is cleared when
-- its own outcome is recorded or its lease taken back, but not when the
-- chained job's outcome comes first (it is then stale), so each next read
-- is checked against its job: one more HMGET per running holder with a
-- next, here only, so that no job transition pays for it.
local function key_info(k, holders)
  local h, p, m = key_keys(k)
  local mv = redis.call('HMGET', m, 'limit', 'def')
  local ids = redis.call('SMEMBERS', h)
  local np = redis.call('LLEN', p)
  local active = 0
  if mv[1] or #ids > 0 or np > 0 then active = 1 end
  local override = 0
  if mv[1] then override = 1 end
  local oldest = false
  if np > 0 then
    oldest = tonumber(redis.call('HGET', J .. redis.call('LINDEX', p, 0), 'parked')) or false
  end
  local out = {active, tonumber(mv[1] or mv[2] or '-1'), override, #ids, 0, np, oldest, 0, 0}
  table.sort(ids)
  local running, fence, chained = 0, 0, 0
  for _, id in ipairs(ids) do
    local v = redis.call('HMGET', J .. id, 'state', 'fence', 'lease_until', 'next')
    local nx = ''
    if v[1] == 'running' then
      running = running + 1
      fence = math.max(fence, tonumber(v[2]) or 0)
      if v[4] and v[4] ~= '' then
        local c = redis.call('HMGET', J .. v[4], 'state', 'after', 'fence')
        if c[1] == 'running' and c[2] == id then
          chained = chained + 1
          nx = v[4]
          fence = math.max(fence, tonumber(c[3]) or 0)
        end
      end
    end
    if holders then out[#out + 1] = {id, v[1] or '', v[2] or '', v[3] or '', nx} end
  end
  out[5], out[8], out[9] = running, fence, chained
  return out
end

-- Chained leases (batondriver.JobFetchParams.Chain). A chained job is
-- running, in R with the score +inf (it is never taken back on its own),
-- after = the ID of the job ahead of it, which holds the key's slot and has
-- next = its ID. It leaves the chain by one of:
--   the job ahead's outcome (job_finish.lua): it takes over the slot and
--     lease_until, and its after is cleared (hand_over below);
--   the job ahead's lease expiring (job_fetch.lua): back to the head of its
--     key's parked jobs, its attempt not counted (unchain below);
--   its own outcome, first: recorded as any other; it frees no slot.
local CHAINED = '+inf'

-- The lease of a chained job: derived from the lease of the job ahead (a
-- secret only its holder knows) and the job's ID, so that the caller need
-- not send a lease for every job that might be chained.
local function chained_lease(ahead_lease, id)
  return string.sub(redis.sha1hex(ahead_lease .. ':' .. id), 1, LEASE_LEN)
end

-- The unique claims of job id, whose fields are in v, as it starts: taken
-- (running scope; among twins unique while running, the one that started
-- last holds it) or given up (queued scope).
local function start_claims(id, v)
  local u, scope = v[FI.ukey], v[FI.uscope]
  if scope == 'running' then
    claim(u, scope, id, 0)
  elseif scope == 'queued' then
    unclaim(u, scope, id)
  end
end

-- Start job id, whose fields are in v, under lease l until until_ (a
-- number; suntil as a string): state running, its attempt counted, unique
-- claims taken or given up (start_claims) unless claimed is set (the
-- caller did), and fence, if not nil, as its fencing token. extra holds
-- more fields to write, or nil. Updates v and writes the job with one HSET.
local function start(key, id, v, l, snow, suntil, fence, extra, claimed)
  local attempt = int(tonumber(v[FI.attempt]) + 1)
  if not claimed then start_claims(id, v) end
  -- The fields go to HSET directly, without a table (see update): this
  -- runs for every job leased.
  v[FI.state], v[FI.attempt], v[FI.attempted], v[FI.lease], v[FI.lease_until] = 'running', attempt, snow, l, suntil
  if not fence then
    redis.call('HSET', key, 'state', 'running', 'attempt', attempt, 'attempted', snow, 'lease', l,
      'lease_until', suntil)
    return
  end
  v[FI.fence] = int(fence)
  if not extra then
    redis.call('HSET', key, 'state', 'running', 'attempt', attempt, 'attempted', snow, 'lease', l,
      'lease_until', suntil, 'fence', v[FI.fence])
    return
  end
  for i = 1, #extra, 2 do
    if FI[extra[i]] then v[FI[extra[i]]] = extra[i + 1] end
  end
  redis.call('HSET', key, 'state', 'running', 'attempt', attempt, 'attempted', snow, 'lease', l,
    'lease_until', suntil, 'fence', v[FI.fence], unpack(extra))
end

-- Chain the next parked job of key k behind job ahead (lease l, lease_until
-- suntil), with fencing token fence: popped from the key's parked list
-- (skipping IDs no longer parked, as promote does) and started, its score
-- in R left to the caller, and its attempted so far kept in
-- attempted_before (for unchain). Appends its ID to batch.unparked (for
-- PK), and to batch the jobs it promotes when the key's parked jobs have
-- mixed defaults (the caller flushes batch).
-- Returns its ID and fields, or nil if nothing was parked or the job could
-- not be promoted into the slot it would take over: the key's holders,
-- that slot counted, exceed the key's override, else the job's own default
-- limit (the key was lowered or halted, or its parked jobs' defaults are
-- mixed: see promote). The holders beyond the limit hand on nothing.
local function chain_next(batch, ahead, l, k, snow, suntil, fence)
  local h, p, m = key_keys(k)
  local popped = 0
  local override, mixed, nh -- read once a parked job is found
  while true do
    local id = redis.call('LPOP', p)
    if not id then break end
    local key = J .. id
    local v = load_job(key)
    if v and v[FI.state] == 'parked' then
      if not nh then
        override, mixed = unpack(redis.call('HMGET', m, 'limit', 'mixed'))
        nh = redis.call('SCARD', h)
      end
      if nh > (tonumber(override or v[FI.limit]) or 0) then
        redis.call('LPUSH', p, id)
        break
      end
      popped = popped + 1
      batch.unparked[#batch.unparked + 1] = id
      redis.call('ZINCRBY', KI, popped, k)
      start(key, id, v, chained_lease(l, id), snow, suntil, fence,
        {'after', ahead, 'attempted_before', v[FI.attempted] or ''})
      -- With mixed defaults the new head may fit beside the holders
      -- under its own, larger, default: it is promoted now, as a freed
      -- slot would promote it. (With one default it cannot: the chained
      -- job did not fit.)
      if mixed and not override then promote(batch, k) end
      return id, v
    end
    popped = popped + 1
    batch.unparked[#batch.unparked + 1] = id
  end
  if popped > 0 then redis.call('ZINCRBY', KI, popped, k) end
  return nil
end

-- Put job id, of concurrency key k and default limit def, at the head of
-- k's parked jobs, parked since ms at; the caller writes its hash. While it
-- was out, the key may have admitted jobs of another default: then the
-- parked jobs' defaults are mixed (see promote).
local function park_first(k, id, at, def)
  local _, p, m = key_keys(k)
  redis.call('LPUSH', p, id)
  if redis.call('HGET', m, 'def') ~= def then redis.call('HSET', m, 'mixed', '1') end
  redis.call('ZINCRBY', KI, -1, k)
  redis.call('ZADD', PK, at, id)
end

-- Cancel requests (batondriver.JobDriver.JobCancel). An admin's request
-- to cancel a running job is stored in it: cancel (server ms of the
-- request, in F) and cancel_reason. job_extend.lua reports it at every
-- renewal, and whatever ends the attempt but a completion ends the job
-- cancelled instead: an outcome (job_finish.lua), a give-back (give_back),
-- a chained job put back unrun (unchain), a lease taken back (job_fetch.lua,
-- take_back).

-- The error recorded for a job that a cancel request of reason ends: the
-- reason, then msg if there is one (batondriver.CancelledError).
local function cancel_error(reason, msg)
  if not msg or msg == '' then return reason end
  return reason .. ': ' .. msg
end

-- Append to t the fields that end a job cancelled at server ms now, its
-- cancel request cleared (a retry runs it anew). The caller records the
-- error (cancel_error), puts the job in X and releases its unique claim.
local function cancel_end(t, now)
  put(t, 'state', 'cancelled', 'finished', int(now), 'cancel', '', 'cancel_reason', '')
end

-- End job id at key, whose cancel was requested (reason), cancelled at now
-- rather than put back to run later: attempt is its attempt count after,
-- errs its errors JSON before, t more fields to write. It leaves R and
-- releases its unique claim; the caller has taken it out of its key's
-- holders, if it held a slot.
local function cancel_back(key, id, t, attempt, errs, reason, ukey, uscope, now)
  redis.call('ZREM', R, id)
  unclaim(ukey, uscope, id)
  put(t, 'attempt', int(attempt), 'errors', add_error({errors = errs}, attempt, now, cancel_error(reason)))
  cancel_end(t, now)
  redis.call('HSET', key, unpack(t))
  redis.call('ZADD', X, now, id)
end

-- Give job ahead the claim while running of unique key u that job id,
-- chained behind it and now put back unrun, took over as it started, if
-- id still holds it and ahead runs on unique while running under u.
local function hand_claim_back(u, scope, id, ahead)
  if scope ~= 'running' or not u or u == '' then return end
  local f = claim_field(u, scope)
  if redis.call('HGET', U, f) ~= '0:' .. id then return end
  local av = redis.call('HMGET', J .. ahead, 'state', 'ukey', 'uscope')
  if av[1] == 'running' and av[2] == u and av[3] == scope then redis.call('HSET', U, f, '0:' .. ahead) end
end

-- Put chained job id back at the head of its key's parked jobs if it is
-- still chained behind job ahead, whose lease expired: parked since its
-- parked time, its attempt not counted and its attempted that of its last
-- counted attempt again (attempted_before), its unique claims as when it
-- was parked. The caller frees the slot of the job ahead next, which then
-- promotes it first. While it was chained the key may have admitted a job
-- of another default: then the parked jobs' defaults are mixed (see
-- promote). Unique while running, it gives the claim it took as it
-- started back to the job ahead (hand_claim_back). A job whose cancel was
-- requested ends cancelled instead (cancel_back).
local function unchain(id, ahead, now)
  local key = J .. id
  local v = redis.call('HMGET', key, 'state', 'after', 'attempt', 'key', 'ukey', 'uscope', 'parked', 'limit',
    'attempted_before', 'cancel', 'cancel_reason', 'errors')
  if v[1] ~= 'running' or v[2] ~= ahead then return end
  local t = {'lease', '', 'lease_until', '', 'after', ''}
  -- A job chained by a version before attempted_before keeps attempted.
  if v[9] then put(t, 'attempted', v[9]) end
  local attempt = math.max(tonumber(v[3]) - 1, 0)
  hand_claim_back(v[5], v[6], id, ahead)
  if v[10] and v[10] ~= '' then
    cancel_back(key, id, t, attempt, v[12], v[11], v[5], v[6], now)
    return
  end
  park_first(v[4], id, tonumber(v[7]) or 0, v[8])
  redis.call('ZREM', R, id)
  reclaim(v[5], v[6], id, now)
  put(t, 'state', 'parked', 'attempt', int(attempt))
  redis.call('HSET', key, unpack(t))
end

-- The fields of a job an outcome reads (job_finish.lua, take_back), in
-- this order: v[1] state, v[2] lease, v[3] lease_until, v[4] attempt, v[5]
-- max, v[6] prio, v[7] errors, v[8] key, v[9] limit, v[10] ukey, v[11]
-- uscope, v[12] runs, v[13] next, v[14] after, v[15] cancel, v[16]
-- cancel_reason.
local OUTCOME_FIELDS = {'state', 'lease', 'lease_until', 'attempt', 'max', 'prio', 'errors',
  'key', 'limit', 'ukey', 'uscope', 'runs', 'next', 'after', 'cancel', 'cancel_reason'}

-- Give running job id at key, whose fields are in v (OUTCOME_FIELDS), back
-- to its place as if it had not been leased (batondriver.JobFinish.GiveBack):
-- its attempt not counted, its unique claim as while queued, and the job
-- itself available (added to batch), holding its key's slot still, unless
-- the key's limit was lowered below its holders since the job was leased:
-- then it gives the slot up and waits at the head of the parked jobs
-- (park_first). Under an override, holders beyond it mean just that (no
-- job is admitted, chained or leased beyond it); without one, the job's
-- limit is its own default, which never changes, so only a removed
-- override can have lowered it: the key's meta keeps the queue's fence of
-- its last change of limit (limit_fence, key_setlimit.lua), and a job
-- leased with a fence no higher ran then. Holders beyond its default
-- admitted under larger defaults of their own lowered nothing. x holds
-- more fields to write. The caller first puts the job chained behind it,
-- if any, back at the head of the parked jobs (unchain), so that this job
-- goes before it; takes the job out of R; and then promotes into its
-- key's free slots. A job whose cancel was requested ends cancelled
-- instead, its slot freed (cancel_back).
local function give_back(batch, key, id, v, now, x)
  local snow = int(now)
  local k = v[8]
  if v[15] and v[15] ~= '' then
    if k and k ~= '' then redis.call('SREM', K .. k .. ':h', id) end
    cancel_back(key, id, {'lease', '', 'lease_until', '', unpack(x)}, math.max(tonumber(v[4]) - 1, 0), v[7], v[16], v[10], v[11], now)
    return
  end
  reclaim(v[10], v[11], id, now)
  local t = {'lease', '', 'lease_until', '', 'attempt', int(math.max(tonumber(v[4]) - 1, 0)), 'run_at', snow, unpack(x)}
  if k and k ~= '' then
    local h, _, m = key_keys(k)
    local mv = redis.call('HMGET', m, 'limit', 'limit_fence')
    if redis.call('SCARD', h) > (tonumber(mv[1] or v[9]) or 0) and (mv[1]
        or (tonumber(mv[2]) or 0) >= (tonumber(redis.call('HGET', key, 'fence')) or 0)) then
      redis.call('SREM', h, id)
      park_first(k, id, now, v[9])
      put(t, 'state', 'parked', 'parked', snow)
      redis.call('HSET', key, unpack(t))
      return
    end
  end
  put(t, 'state', 'available')
  make_available(batch, id, v[6])
  redis.call('HSET', key, unpack(t))
end

-- Leasing calls whose replies were lost. A call that leases (a fetch, or
-- a finish that fetches or chains) may run while its reply never reaches
-- the caller: the connection was cut after the command went out, or the
-- caller gave up as the reply travelled. Its jobs would run nowhere until
-- their leases expired, an attempt counted for each. So such a call records
-- what it leased, and a later call of the same process gives those jobs
-- back (settle), their attempts not counted.
--
-- A record is a string key of the caller's naming, passed in KEYS with a
-- nonce in ARGV: "nonce id lease id lease ...", each job leased or chained
-- with its lease, written (SET, PX until RECORD_GRACE after the last of
-- those leases ends) only if the call leased or chained any. The caller reuses its record keys once it has the reply
-- of the call that used one, and tells calls apart by their nonces: a
-- record with another call's nonce is not that call's.

-- How long a record outlives its leases, in ms: longer than its caller
-- settles a lost call (minLostWait in leaserecords.go, a minute after the
-- call failed, itself at most a lease wait after the record was written).
-- A settle that comes after the leases ran out (its caller stalled, or
-- called nothing for longer than the lease) then still finds the record,
-- and gives back as never leased the jobs no call has taken back as
-- expired yet: a job of one attempt does not go dead without having run.
local RECORD_GRACE = 120000

-- Write the record of this call: jobs, a list {id, lease, ...}, under key
-- rec with nonce, for RECORD_GRACE ms beyond ttl, when the jobs' leases
-- end. Nothing if jobs is empty.
local function write_record(rec, nonce, jobs, ttl)
  if #jobs == 0 then return end
  redis.call('SET', rec, nonce .. ' ' .. table.concat(jobs, ' '), 'PX', math.max(ttl, 0) + RECORD_GRACE)
end

-- Take job id back from a call whose reply was lost, if it still runs
-- under lease l: a job still chained behind the job ahead goes back to the
-- head of its key's parked jobs (unchain); any other is given back
-- (give_back), the job chained behind it unchained first; either ends
-- cancelled instead if its cancel was requested. Then the key's free
-- slots, if any (one may have freed while a job was chained), promote its
-- parked jobs.
local function take_back(batch, id, l, now)
  local key = J .. id
  local v = redis.call('HMGET', key, unpack(OUTCOME_FIELDS))
  if v[1] ~= 'running' or v[2] ~= l then return end
  if v[14] and v[14] ~= '' then
    unchain(id, v[14], now)
  else
    redis.call('ZREM', R, id)
    local x = {}
    if v[13] and v[13] ~= '' then
      unchain(v[13], id, now)
      put(x, 'next', '')
    end
    give_back(batch, key, id, v, now, x)
  end
  -- A slot freed while a job was chained goes to it now (as a finish's give
  -- back does).
  if v[8] and v[8] ~= '' then promote(batch, v[8]) end
end

-- Settle the caller's lost calls: spec lists "nonce:waits" per call, where
-- waits is the call's last server ms to lease ("0": none), and the call's
-- KEYS, keys, hold their record keys from keys[first] on. A call whose
-- record is found has its jobs
-- taken back (take_back; found again, it takes back nothing more). A call
-- with no record leased nothing, or has not run yet: once past its waits it
-- never will. Returns the 1-based indexes of the calls that may still run,
-- for the caller to settle later, and the number of calls in spec.
local function settle(batch, now, keys, first, spec)
  local unsettled, i = {}, 0
  for nonce, w in string.gmatch(spec, '(%w+):(%d+)') do
    local rec = redis.call('GET', keys[first + i])
    i = i + 1
    if rec and string.sub(rec, 1, #nonce + 1) == nonce .. ' ' then
      for id, l in string.gmatch(string.sub(rec, #nonce + 2), '(%S+) (%S+)') do
        take_back(batch, id, l, now)
      end
    elseif tonumber(w) == 0 or now <= tonumber(w) then
      unsettled[#unsettled + 1] = i
    end
  end
  return unsettled, i
end

-- Lease up to max available jobs, in fetch order (priority, then arrival),
-- to the caller: each gets the next LEASE_LEN characters of leases as its
-- lease, lasting ttl ms from now, its attempt counted, and, if keyed, the
-- queue's next fencing token; a job unique while running claims its unique
-- key, one unique while queued gives it up (start_claims). Appends each job's ID and fields to
-- out.
--
-- The jobs this script made available, in batch, come after those already
-- in the available lists in fetch order (they arrive later), so the lists'
-- heads are popped first, from the most urgent of bands on (the
-- priorities read from M by read_meta), and merged with them by priority;
-- a job of the batch leased here never enters a list, and the rest of the
-- batch is flushed to the lists' tails (a job popped but not taken,
-- because the batch had more urgent ones, goes back to its list's head).
--
-- handed lists the chained jobs that just took over the slots of the jobs
-- ahead of them (job_finish.lua), each {id, lease, k, lease_until}: lease
-- writes their new lease_until and puts them in R. Then, if chain is set
-- and no job is left available, a job is chained behind each of them and
-- behind each keyed job leased here whose key has parked jobs
-- (chain_next), until a chain promotes a job, which is then left
-- available; the chained jobs are appended to out after the leased ones.
-- Returns how many jobs were taken; if that is max, how many are left
-- available (else 0); how many of the batch were flushed to the lists; and
-- how many jobs the chains promoted.
--
-- rec, if not nil, is {key, nonce}: the jobs leased and chained here are
-- recorded there (write_record) for the caller to take back should the
-- reply be lost.
--
-- Fencing tokens are the queue's, not each key's, so that an idle key
-- keeps nothing: each is one more than the queue's last (last, M's fence,
-- which the caller reads with read_meta; 0 if none) and at
-- least the server's ms × 1024, so that they rise even if the last was lost
-- (a restart without persistence, a failover to a replica that missed it),
-- provided the server clock did not go back and the queue leased fewer than
-- 1024 keyed jobs a millisecond. Strictly rising per queue, they rise per
-- key. (Exact in a Lua number, a double, until the year 2248.)
local function lease(out, max, ttl, leases, now, last, bands, batch, chain, handed, rec)
  -- popped: {id, priority, ...} in fetch order.
  local popped, drained = {}, {}
  for _, p in ipairs(bands) do
    local want = max - #popped / 2
    if want <= 0 then break end
    local ids = redis.call('LPOP', A .. p, want) or {}
    for _, id in ipairs(ids) do
      popped[#popped + 1] = id
      popped[#popped + 1] = p
    end
    if #ids < want then drained[#drained + 1] = BAND_FIELDS[p + 1] end
  end
  if #drained > 0 then redis.call('HDEL', M, unpack(drained)) end
  local np, nb = #popped / 2, #batch / 2
  -- The batch in fetch order: by priority, then as collected.
  local order = {}
  for i = 1, nb do order[i] = i end
  if nb > 1 then
    table.sort(order, function(x, y)
      if batch[2 * x - 1] ~= batch[2 * y - 1] then return batch[2 * x - 1] < batch[2 * y - 1] end
      return x < y
    end)
  end
  -- Merge: a popped job goes first unless a batch job is more urgent.
  local ids, taken, pi, bi = {}, {}, 1, 1
  while #ids < max and (pi <= np or bi <= nb) do
    if bi > nb or (pi <= np and popped[2 * pi] <= batch[2 * order[bi] - 1]) then
      ids[#ids + 1] = popped[2 * pi - 1]
      pi = pi + 1
    else
      ids[#ids + 1] = batch[2 * order[bi]]
      taken[order[bi]] = true
      bi = bi + 1
    end
  end
  if pi <= np then
    local back = {}
    for i = pi, np do
      local p = popped[2 * i]
      if not back[p] then back[p] = {} end
      back[p][#back[p] + 1] = popped[2 * i - 1]
    end
    for p = 0, MAX_PRIORITY do
      if back[p] then push_band(p, back[p], true) end
    end
  end
  local made, pushed = flush_available(batch, taken)
  -- Left available: the lists had more than they gave only if the pop was
  -- full.
  local n, left = #ids, 0
  if n == max then
    if np == max then
      local lists, seen = {}, {}
      for _, p in ipairs(bands) do
        lists[#lists + 1], seen[p] = p, true
      end
      for p in pairs(pushed) do
        if not seen[p] then lists[#lists + 1] = p end
      end
      left = available_count(lists)
    else
      left = np - pi + 1 + made
    end
  end
  chain = chain and left == 0

  local running, chained, unparked = {}, {}, new_batch() -- unparked: the chains' (and their promotions')
  local leased, leased_until = {}, now -- id, lease, ...: the record, and its jobs' last lease_until
  local fence = math.max(last, now * 1024 - 1)
  local fenced = false
  local snow = int(now)
  local until_ = now + ttl
  local suntil = int(until_)
  -- Chain job c behind job ahead (lease l, until u), if chain and its key
  -- has parked jobs; returns the extra fields for the job ahead. A chain
  -- that promotes a job (mixed defaults: see chain_next) leaves it
  -- available, which ends the chains, so that no job chained later passes
  -- it over.
  local function behind(ahead, l, k, u)
    if not chain then return nil end
    fence = fence + 1
    local before = #unparked
    local c, cv = chain_next(unparked, ahead, l, k, snow, int(u), fence)
    if not c then
      fence = fence - 1
      return nil
    end
    if #unparked > before then chain = false end
    fenced = true
    running[#running + 1] = CHAINED
    running[#running + 1] = c
    chained[#chained + 1] = c
    chained[#chained + 1] = cv
    leased[#leased + 1] = c
    leased[#leased + 1] = cv[FI.lease]
    leased_until = math.max(leased_until, u)
    return {'next', c}
  end
  for _, hd in ipairs(handed) do
    local id, u = hd[1], tonumber(hd[4])
    local extra = behind(id, hd[2], hd[3], u) or {}
    redis.call('HSET', J .. id, 'after', '', 'lease_until', hd[4], unpack(extra))
    running[#running + 1] = u
    running[#running + 1] = id
  end
  for k, id in ipairs(ids) do
    local key = J .. id
    local v = load_job(key)
    if v then
      local l = string.sub(leases, (k - 1) * LEASE_LEN + 1, k * LEASE_LEN)
      if v[FI.key] and v[FI.key] ~= '' then
        fence, fenced = fence + 1, true
        local own = fence
        -- Its claims first: a twin chained behind it, which runs after it,
        -- then holds a claim they share (behind runs before start).
        start_claims(id, v)
        start(key, id, v, l, snow, suntil, own, behind(id, l, v[FI.key], until_), true)
      else
        start(key, id, v, l, snow, suntil)
      end
      running[#running + 1] = until_
      running[#running + 1] = id
      leased[#leased + 1] = id
      leased[#leased + 1] = l
      leased_until = math.max(leased_until, until_)
      push_job(out, id, v)
    end
  end
  for i = 1, #chained, 2 do push_job(out, chained[i], chained[i + 1]) end
  zadd(R, running)
  local promoted = flush_available(unparked)
  if fenced then redis.call('HSET', M, 'fence', int(fence)) end
  if rec then write_record(rec[1], rec[2], leased, leased_until - now) end
  return n, left, made, promoted
end
