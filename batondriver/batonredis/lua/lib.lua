-- lib.lua: definitions shared by every lock transition; prepended to each
-- script when it is compiled. Every lock script takes the same KEYS, all in
-- one hash slot (they share the hash tag of the lock key):
--
--   KEYS[1] H  sorted set of holders: member "fence:token", score = expiry (ms, server time)
--   KEYS[2] W  sorted set of waiters: member token, score = arrival sequence (FIFO order)
--   KEYS[3] X  sorted set of waiters: member token, score = expiry of the waiter's place
--   KEYS[4] I  hash: waiter token -> "ttl_ms|listener id" (lease TTL to grant, whom to notify),
--              or GONE for a token that gave up waiting (release.lua); X
--              holds that mark's expiry, W does not hold the token
--   KEYS[5] C  hash: fence (last fencing token, see new_fence), seq (last arrival
--              number, see new_seq), limit (override from set-limit), dlimit
--              (default from acquirers), exp (when C's expiry was last set
--              to run out, server ms; see touch)
--
-- Tokens hold neither ':' nor '|' (batondriver.CheckLockAcquire and the
-- other checks refuse them), so the members above split unambiguously.
--
-- H, W, X and I carry expiries and vanish when empty. C outlives them by
-- the driver's idle TTL and then goes too, unless it holds a limit override
-- (then it has no expiry): fences and arrival numbers are floored by the
-- server clock, so they keep rising when C is gone.
--
-- Every redis.call costs one to three microseconds of the server's single
-- thread, so the common paths make few: holders are reaped only when the
-- key looks full, the configuration is read once and written at most once
-- per script.
local H, W, X, I, C = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]

-- The value of I for a token that gave up (see I above).
local GONE = 'gone'

-- Server time in milliseconds. All expiry decisions use it.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- An integer as a string. Lua's own conversion keeps only 14 digits, and
-- fences have 16.
local function int(n)
  return string.format('%d', n)
end

-- The key's state from C: st.limit is the override if one is stored, else
-- default (the caller's), else the stored default, else 1. idle is the
-- driver's idle TTL in ms: how long C outlives what it last covered; now
-- the script's server time.
local function load(default, idle, now)
  local c = redis.call('HMGET', C, 'limit', 'dlimit', 'fence', 'seq', 'exp')
  return {
    limit = tonumber(c[1] or default or c[2] or 1),
    override = c[1] ~= false,
    dlimit = c[2],
    fence = tonumber(c[3] or 0),
    seq = tonumber(c[4] or 0),
    exp = tonumber(c[5] or 0),
    idle = idle,
    now = now,
    set = {},
  }
end

-- Set field of C to value on save, once however often it is called.
local function stage(st, field, value)
  st.at = st.at or {}
  local i = st.at[field]
  if not i then
    table.insert(st.set, field)
    table.insert(st.set, '')
    i = #st.set
    st.at[field] = i
  end
  st.set[i] = value
end

-- Keep C at least until need ms from now, and the idle TTL beyond: a
-- holder's lease or a waiter's place that this script granted, extended or
-- refreshed must not outlive C, whose default limit its release uses. The
-- expiry is set again only once less than half the idle TTL is left beyond
-- need, so that a busy key pays for it rarely; with an override C keeps no
-- expiry at all.
local function touch(st, need)
  if st.override then return end
  if st.exp >= st.now + need + st.idle / 2 then return end
  st.exp = st.now + need + st.idle
  st.expire = need + st.idle
  stage(st, 'exp', int(st.exp))
end

-- Write back what changed in C, in one call, then its expiry if touch
-- asked for one. A C written without an expiry of its own (recreated by a
-- call that neither grants nor queues, after it expired: a failed try, a
-- late recheck) gets the idle TTL, so that it never stays for good without
-- an override.
local function save(st)
  if #st.set > 0 and st.exp == 0 then touch(st, 0) end
  if #st.set > 0 then
    redis.call('HSET', C, unpack(st.set))
  end
  if st.expire then
    redis.call('PEXPIRE', C, st.expire)
    st.expire = nil
  end
end

-- The key's next fencing token: one more than the last, and never less than
-- the server's time in ms times 1024. The floor keeps fences rising across a
-- restart that lost the counter and across a failover to a replica that
-- missed the last grants, provided the server clock did not go back and the
-- key saw fewer than 1024 grants a millisecond. (Exact in a Lua number, a
-- double, until the year 2248.)
local function new_fence(st, now)
  st.fence = math.max(st.fence + 1, now * 1024)
  stage(st, 'fence', int(st.fence))
  return st.fence
end

-- The key's next arrival number, for a waiter's place in W: floored by the
-- server clock like the fences, so that a waiter queued after C expired
-- still goes behind those queued before.
local function new_seq(st, now)
  st.seq = math.max(st.seq + 1, now * 1024)
  stage(st, 'seq', int(st.seq))
  return st.seq
end

-- Make key live at least ms more. existed: whether the key existed before
-- this script wrote to it (our keys always carry an expiry once written).
local function expire_at_least(key, ms, existed)
  if existed then
    redis.call('PEXPIRE', key, ms, 'GT')
  else
    redis.call('PEXPIRE', key, ms)
  end
end

-- The number of live holders and whether H exists. Expired holders are
-- removed only when they could stand in the way: when the key looks full.
-- Removing the last one deletes H, which a grant then writes anew and must
-- give an expiry of its own (expire_at_least).
local function holders(now, limit)
  local n = redis.call('ZCARD', H)
  if n > 0 and n >= limit then
    redis.call('ZREMRANGEBYSCORE', H, '-inf', now)
    n = redis.call('ZCARD', H)
  end
  return n, n > 0
end

-- Drop waiters whose place expired (their process stopped refreshing it),
-- and expired marks of tokens that gave up.
local function reap_waiters(now)
  while true do
    local dead = redis.call('ZRANGE', X, '-inf', now, 'BYSCORE', 'LIMIT', 0, 500)
    if #dead == 0 then return end
    redis.call('ZREM', X, unpack(dead))
    redis.call('ZREM', W, unpack(dead))
    redis.call('HDEL', I, unpack(dead))
  end
end

-- Grant free slots to the waiters at the head of the queue, in arrival order,
-- and notify each one on its listener's channel. n is the number of live
-- holders, existed whether H exists. Returns how many were granted, the new
-- number of holders, and whether waiters may be left (false only when the
-- queue is known to be empty).
local function promote(st, now, n, existed, channel_prefix)
  if n >= st.limit then
    return 0, n, true
  end
  if redis.call('EXISTS', W) == 0 then
    return 0, n, false
  end
  reap_waiters(now)
  local granted, longest, more = 0, 0, true
  while n < st.limit do
    local head = redis.call('ZPOPMIN', W)[1]
    if not head then
      more = false
      break
    end
    local info = redis.call('HGET', I, head) or ''
    redis.call('ZREM', X, head)
    redis.call('HDEL', I, head)
    local ttl, listener = string.match(info, '^(%d+)|(.*)$')
    ttl = tonumber(ttl) or 1
    local fence = int(new_fence(st, now))
    redis.call('ZADD', H, now + ttl, fence .. ':' .. head)
    if listener and listener ~= '' then
      redis.call('SPUBLISH', channel_prefix .. listener, head .. '|' .. fence .. '|' .. int(now) .. '|' .. ttl)
    end
    longest = math.max(longest, ttl)
    n = n + 1
    granted = granted + 1
  end
  if granted > 0 then
    expire_at_least(H, longest, existed)
    touch(st, longest)
  end
  return granted, n, more
end

-- Find the holder member of token (when its fence is unknown); H has at most
-- limit members.
local function find_holder(token)
  local suffix = ':' .. token
  for _, m in ipairs(redis.call('ZRANGE', H, 0, -1)) do
    if string.sub(m, -#suffix) == suffix then return m end
  end
  return nil
end

-- Reap what stands in the way and give free slots to waiters; then save.
-- Returns how many waiters were granted.
local function settle(now, st, channel_prefix)
  local n, existed = holders(now, st.limit)
  local granted = promote(st, now, n, existed, channel_prefix)
  save(st)
  return granted
end
