-- job_list.lua: a page of the queue's jobs in one state, oldest (or next)
-- first.
-- Changes nothing.
--
-- KEYS: the queue keys (see joblib.lua). This script builds job keys as
-- J .. id, and a concurrency key's parked list from K: the IDs come from
-- the state's sorted set, a key's parked list, or the available lists
-- (and, LEGACY, the sorted set A without its last ":"; see the exception in
-- joblib.lua).
-- ARGV[1] state
-- ARGV[2] offset
-- ARGV[3] limit
-- ARGV[4] a concurrency key, or "": with a key (state parked), the key's
-- parked list, head first, the order its jobs will be promoted in
--
-- Returns {total, then per job its ID and the array of its fields (F in
-- joblib.lua), then its output (adminFields in jobs.go)}.
-- Available jobs are listed in fetch order (priority, then arrival: when
-- they became available; LEGACY jobs after the listed ones of their
-- priority); scheduled ones by
-- run_at, parked ones by when they were parked, dead, cancelled and dropped
-- ones by finished, completed ones by when they are deleted (by finished, as
-- long as every finish uses the same retention), and running ones by
-- attempted: R is ordered by lease_until, which extensions change, so it is
-- read whole and sorted here. It holds at most the jobs being worked on.
local set = state_set(ARGV[1])
local offset, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {0}
local ids
if ARGV[4] ~= '' then
  local _, p = key_keys(ARGV[4])
  out[1] = redis.call('LLEN', p)
  ids = redis.call('LRANGE', p, offset, offset + limit - 1)
elseif ARGV[1] == 'available' then
  -- Available: the lists, most urgent first, walked to the page. LEGACY:
  -- while M's seq is set, each priority's jobs still in the sorted set of
  -- an older version follow its listed ones, in the set's order, since a
  -- fetch moves them to the tail of the list before it pops (migrate in
  -- joblib.lua). Without seq this costs nothing: seq is read with the flags.
  local mv = redis.call('HMGET', M, 'seq', unpack(BAND_FIELDS))
  local legacy = mv[1] and legacy_set()
  local listed = {}
  for _, p in ipairs(flagged(mv, 2)) do listed[p] = true end
  ids = {}
  -- The part of the page in a run of n jobs that follows the runs walked
  -- so far: its start in the run and length, or nil if none; counts the
  -- run in the total.
  local function on_page(n)
    local from, want = math.max(offset - out[1], 0), limit - #ids
    out[1] = out[1] + n
    if want > 0 and from < n then return from, want end
  end
  local function add(page)
    for _, id in ipairs(page) do ids[#ids + 1] = id end
  end
  for p = 0, MAX_PRIORITY do
    if listed[p] then
      local from, want = on_page(redis.call('LLEN', A .. p))
      if from then add(redis.call('LRANGE', A .. p, from, from + want - 1)) end
    end
    if legacy then
      local lo, hi = legacy_band(p)
      local from, want = on_page(redis.call('ZCOUNT', legacy, lo, hi))
      if from then add(redis.call('ZRANGE', legacy, lo, hi, 'BYSCORE', 'LIMIT', from, want)) end
    end
  end
elseif set == R then
  out[1] = redis.call('ZCARD', R)
  local all = redis.call('ZRANGE', R, 0, -1)
  local at, rank = {}, {}
  for i, id in ipairs(all) do
    at[id] = tonumber(redis.call('HGET', J .. id, 'attempted')) or 0
    rank[id] = i
  end
  table.sort(all, function(a, b)
    if at[a] ~= at[b] then return at[a] < at[b] end
    return rank[a] < rank[b]
  end)
  ids = {}
  for i = offset + 1, math.min(offset + limit, #all) do ids[#ids + 1] = all[i] end
else
  out[1] = redis.call('ZCARD', set)
  ids = redis.call('ZRANGE', set, offset, offset + limit - 1)
end
-- A row's fields and its output, in one HMGET (adminFields in jobs.go).
local fields = {unpack(F)}
fields[#F + 1] = 'output'
for _, id in ipairs(ids) do
  local v = redis.call('HMGET', J .. id, unpack(fields))
  if v[FI.state] then push_job(out, id, v) end
end
return out
