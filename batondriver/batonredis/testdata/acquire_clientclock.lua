-- acquire_clientclock.lua: BROKEN ON PURPOSE, for the contention tests only.
-- lua/acquire.lua with one change: "now" is the caller's wall clock
-- (ARGV[8], ms) instead of the server's TIME, as lock libraries that trust
-- client clocks do. A caller whose clock runs ahead sees live holders as
-- expired and grants their slots again. Everything below the contract is
-- lua/acquire.lua verbatim except the line marked BROKEN;
-- TestBrokenClientClock fails if the two drift apart.
--
-- ARGV[1..7] as in lua/acquire.lua
-- ARGV[8] the caller's clock in ms since the Unix epoch
local token, ttl, mode = ARGV[1], tonumber(ARGV[2]), ARGV[4]
local now = tonumber(ARGV[8]) -- BROKEN: the client's clock, not TIME

local st = load(ARGV[3])
if st.dlimit ~= ARGV[3] then
  table.insert(st.set, 'dlimit')
  table.insert(st.set, ARGV[3])
end
local n, existed = holders(now, st.limit)
local promoted, more
promoted, n, more = promote(st, now, n, existed, ARGV[6])
existed = existed or promoted > 0

local function next_expiry()
  local first = redis.call('ZRANGE', H, 0, 0, 'WITHSCORES')
  if #first == 0 then return 0 end
  return math.max(tonumber(first[2]) - now, 1)
end

if mode == 'recheck' then
  if redis.call('ZSCORE', W, token) then
    save(st)
    local wttl = tonumber(ARGV[5])
    redis.call('ZADD', X, now + wttl, token)
    redis.call('PEXPIRE', W, wttl, 'GT')
    redis.call('PEXPIRE', X, wttl, 'GT')
    redis.call('PEXPIRE', I, wttl, 'GT')
    return {0, 0, 0, redis.call('ZRANK', W, token) + 1, next_expiry(), now}
  end
  local held = find_holder(token)
  if held then
    save(st)
    local fence = string.match(held, '^(%d+):')
    return {1, tonumber(fence), tonumber(redis.call('ZSCORE', H, held)) - now, 0, 0, now}
  end
  -- The place expired and no grant is left (a long pause): queue again below.
end

-- With a free slot, promote() has emptied the queue: nobody is overtaken.
if n < st.limit and not more then
  local fence = new_fence(st, now)
  redis.call('ZADD', H, now + ttl, int(fence) .. ':' .. token)
  expire_at_least(H, ttl, existed)
  save(st)
  return {1, fence, ttl, 0, 0, now}
end
save(st)

if mode == 'try' then
  return {0, 0, 0, 0, next_expiry(), now}
end

local wttl = tonumber(ARGV[5])
local queued = redis.call('EXISTS', W) == 1
local seq = redis.call('HINCRBY', C, 'seq', 1)
redis.call('ZADD', W, seq, token)
redis.call('ZADD', X, now + wttl, token)
redis.call('HSET', I, token, ARGV[2] .. '|' .. ARGV[7])
expire_at_least(W, wttl, queued)
expire_at_least(X, wttl, queued)
expire_at_least(I, wttl, queued)
return {0, 0, 0, redis.call('ZCARD', W), next_expiry(), now}
