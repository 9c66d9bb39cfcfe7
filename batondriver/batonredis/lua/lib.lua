-- lib.lua: definitions shared by every lock transition; prepended to each
-- script when it is compiled. Every lock script takes the same KEYS, all in
-- one hash slot (they share the hash tag of the lock key):
--
--   KEYS[1] H  sorted set of holders: member "fence:token", score = expiry (ms, server time)
--   KEYS[2] W  sorted set of waiters: member token, score = arrival sequence (FIFO order)
--   KEYS[3] X  sorted set of waiters: member token, score = expiry of the waiter's place
--   KEYS[4] I  hash: waiter token -> "ttl_ms|listener id" (lease TTL to grant, whom to notify)
--   KEYS[5] C  hash: fence (last fencing token, see next_fence), seq (last arrival number),
--              limit (override from set-limit), dlimit (default from acquirers)
--
-- H, W, X and I carry expiries and vanish when empty; C lives forever so that
-- fencing tokens never repeat.
local H, W, X, I, C = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]

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

-- The key's next fencing token: one more than the last, and never less than
-- the server's time in ms times 1024. The floor keeps fences rising across a
-- restart that lost the counter and across a failover to a replica that
-- missed the last grants, provided the server clock did not go back and the
-- key saw fewer than 1024 grants a millisecond. (Exact in a Lua number, a
-- double, until the year 2248.)
local function next_fence(now)
  local fence = math.max(tonumber(redis.call('HGET', C, 'fence') or 0) + 1, now * 1024)
  redis.call('HSET', C, 'fence', int(fence))
  return fence
end

-- The effective limit: the override if one is stored, else the default.
local function limit_of(override, default)
  return tonumber(override or default or 1)
end

-- Make key live at least ms milliseconds more.
local function keep(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end

-- Drop waiters whose place expired (their process stopped refreshing it).
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
-- and notify each one on its listener's channel. Returns how many were granted.
local function promote(now, limit, channel_prefix)
  local free = limit - redis.call('ZCARD', H)
  local n = 0
  while free > 0 do
    local head = redis.call('ZRANGE', W, 0, 0)[1]
    if not head then break end
    local info = redis.call('HGET', I, head) or ''
    redis.call('ZREM', W, head)
    redis.call('ZREM', X, head)
    redis.call('HDEL', I, head)
    local ttl, listener = string.match(info, '^(%d+)|(.*)$')
    ttl = tonumber(ttl) or 1
    local fence = next_fence(now)
    redis.call('ZADD', H, now + ttl, int(fence) .. ':' .. head)
    keep(H, ttl)
    if listener and listener ~= '' then
      redis.call('SPUBLISH', channel_prefix .. listener, head .. '|' .. int(fence) .. '|' .. int(now) .. '|' .. ttl)
    end
    free = free - 1
    n = n + 1
  end
  return n
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

-- Release slots of expired holders and places of expired waiters, then give
-- free slots to waiters. Returns how many waiters were granted.
local function settle(now, limit, channel_prefix)
  redis.call('ZREMRANGEBYSCORE', H, '-inf', now)
  if redis.call('EXISTS', W) == 0 then return 0 end
  reap_waiters(now)
  return promote(now, limit, channel_prefix)
end
