-- job_stats.lua: count the queue's jobs by state. Changes nothing.
--
-- KEYS: the queue keys (see joblib.lua). This script builds job keys as
-- J .. id: the IDs come from the available lists (and, LEGACY, the sorted
-- set A without its last ":"; see the exception in joblib.lua).
--
-- Returns {paused (0|1), available, scheduled, running, completed, dead,
-- cancelled, parked, dropped, active concurrency keys, jobs ever dropped,
-- the oldest available run_at or false}. Completed jobs past their
-- retention count until a fetch sweeps them.
--
-- The oldest available run_at is the earliest run_at of the jobs at the
-- front of each priority (the next to be fetched of each): the one that
-- has waited longest, unless a job became available well after its run_at
-- (a scheduled job swept late, a promoted parked job) and so queued behind
-- younger ones.
--
-- LEGACY: while M's seq is set, the jobs still in the sorted set of an
-- older version (see migrate in joblib.lua) count as available too, and
-- where a priority's list is empty the first of them of that priority is
-- at its front: a fetch moves them behind the listed jobs of their
-- priority. Without seq this costs nothing: seq is read with the rest of M.
local m = redis.call('HMGET', M, 'paused', 'dropped', 'seq', unpack(BAND_FIELDS))
local oldest, available = false, 0
local function front(id)
  local at = tonumber(redis.call('HGET', J .. id, 'run_at'))
  if at and (not oldest or at < oldest) then oldest = at end
end
local listed = {}
for _, p in ipairs(flagged(m, 4)) do
  local first = redis.call('LINDEX', A .. p, 0)
  if first then
    listed[p] = true
    available = available + redis.call('LLEN', A .. p)
    front(first)
  end
end
if m[3] then
  local legacy = legacy_set()
  available = available + redis.call('ZCARD', legacy)
  -- The first of each priority with an empty list, skipping from one
  -- priority present in the set to the next.
  local p = 0
  while p <= MAX_PRIORITY do
    if listed[p] then
      p = p + 1
    else
      local from = legacy_band(p)
      local first = redis.call('ZRANGE', legacy, from, '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
      if #first == 0 then break end
      p = legacy_priority(first[2])
      if p <= MAX_PRIORITY and not listed[p] then front(first[1]) end
      p = p + 1
    end
  end
end
local paused = 0
if m[1] == '1' then paused = 1 end
return {paused, available, redis.call('ZCARD', S), redis.call('ZCARD', R),
  redis.call('ZCARD', C), redis.call('ZCARD', D), redis.call('ZCARD', X),
  redis.call('ZCARD', PK), redis.call('ZCARD', Y), redis.call('ZCARD', KI), tonumber(m[2]) or 0, oldest}
