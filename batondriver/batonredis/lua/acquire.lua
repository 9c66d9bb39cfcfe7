-- acquire.lua: grant a slot, or queue (or refresh) a waiter.
--
-- KEYS: H W X I C (see lib.lua)
-- ARGV[1] token
-- ARGV[2] lease TTL in ms
-- ARGV[3] default limit given by the caller (stored as the key's default)
-- ARGV[4] mode: "try" (grant or fail), "wait" (grant or queue),
--         "recheck" (a queued waiter asking again: report a grant made while
--         it waited, or refresh its place)
-- ARGV[5] waiter place TTL in ms (wait and recheck)
-- ARGV[6] channel prefix for grant notices
-- ARGV[7] listener id of the caller (wait and recheck)
--
-- Returns {granted (0|1), fence, lease ms left, queue position (1-based, 0 if
-- not queued), ms until the earliest holder expires (0 if none), server ms}.
--
-- A free slot goes to queued waiters first: a caller never overtakes a waiter.
local token, ttl, mode = ARGV[1], tonumber(ARGV[2]), ARGV[4]
local now = now_ms()

local cfg = redis.call('HMGET', C, 'limit', 'dlimit')
if cfg[2] ~= ARGV[3] then
  redis.call('HSET', C, 'dlimit', ARGV[3])
end
local limit = limit_of(cfg[1], ARGV[3])

settle(now, limit, ARGV[6])

local function next_expiry()
  local first = redis.call('ZRANGE', H, 0, 0, 'WITHSCORES')
  if #first == 0 then return 0 end
  return tonumber(first[2]) - now
end

if mode == 'recheck' then
  local pos = redis.call('ZRANK', W, token)
  if pos then
    local wttl = tonumber(ARGV[5])
    redis.call('ZADD', X, now + wttl, token)
    keep(W, wttl); keep(X, wttl); keep(I, wttl)
    return {0, 0, 0, pos + 1, next_expiry(), now}
  end
  local held = find_holder(token)
  if held then
    local fence = string.match(held, '^(%d+):')
    return {1, tonumber(fence), tonumber(redis.call('ZSCORE', H, held)) - now, 0, 0, now}
  end
  -- The place expired and no grant is left (a long pause): queue again below.
end

if redis.call('EXISTS', W) == 0 and redis.call('ZCARD', H) < limit then
  local fence = next_fence(now)
  redis.call('ZADD', H, now + ttl, int(fence) .. ':' .. token)
  keep(H, ttl)
  return {1, fence, ttl, 0, 0, now}
end

if mode == 'try' then
  return {0, 0, 0, 0, next_expiry(), now}
end

local wttl = tonumber(ARGV[5])
local seq = redis.call('HINCRBY', C, 'seq', 1)
redis.call('ZADD', W, seq, token)
redis.call('ZADD', X, now + wttl, token)
redis.call('HSET', I, token, ARGV[2] .. '|' .. ARGV[7])
keep(W, wttl); keep(X, wttl); keep(I, wttl)
return {0, 0, 0, redis.call('ZCARD', W), next_expiry(), now}
