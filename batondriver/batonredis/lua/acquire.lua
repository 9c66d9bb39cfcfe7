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
-- ARGV[8] the driver's idle TTL in ms (see C in lib.lua)
--
-- Returns {granted (0|1), fence, lease ms left, queue position (1-based, 0 if
-- not queued), ms until the earliest holder expires (0 if none), server ms}.
--
-- A free slot goes to queued waiters first: a caller never overtakes a waiter.
-- A token that holds a slot is granted no second one, in any mode: the call
-- reports the grant it holds (its fence, the ms it has left) and changes
-- nothing else. A lease that ran out is held no more: its token asks anew.
-- A waiting or rechecking token that gave up (release.lua marked it GONE)
-- and holds no live slot changes nothing at all, not even the stored
-- default limit nor the grants to waiters it would bring: the call ran
-- after its caller's give-up. One that holds a slot (taken by a try since)
-- is reported that grant first, as above.
local token, ttl, mode = ARGV[1], tonumber(ARGV[2]), ARGV[4]
local now = now_ms()

local function next_expiry()
  local first = redis.call('ZRANGE', H, 0, 0, 'WITHSCORES')
  if #first == 0 then return 0 end
  return math.max(tonumber(first[2]) - now, 1)
end

-- Changes nothing: the call ran after its caller gave up.
local function gone()
  return {0, 0, 0, 0, next_expiry(), now}
end

-- Whether the token gave up less than its WaitTTL ago. I lives as long as
-- the longest place or mark in it, so a mark past its expiry in X that no
-- reap removed yet is still there: it no longer counts, and the token is a
-- stranger again.
local function gave_up()
  if redis.call('HGET', I, token) ~= GONE then return false end
  local expiry = redis.call('ZSCORE', X, token)
  return expiry ~= false and tonumber(expiry) > now
end

-- A give-up removes the token from the queue and from the holders, but a
-- Try, which no mark stops, may grant it a slot since: what it holds goes
-- before its mark, in every mode. A marked token has no place (its I field
-- is the mark), so the mark is looked for before anything is loaded or
-- staged: a wait or recheck that finds it reports a live grant, else
-- changes nothing.
if mode ~= 'try' and gave_up() then
  local held = find_holder(token)
  local left = held and tonumber(redis.call('ZSCORE', H, held)) - now
  if left and left > 0 then
    return {1, tonumber(string.match(held, '^(%d+):')), left, 0, 0, now}
  end
  return gone()
end

local st = load(ARGV[3], tonumber(ARGV[8]), now)
if st.dlimit ~= ARGV[3] then stage(st, 'dlimit', ARGV[3]) end
local n, existed = holders(now, st.limit)
local promoted, more
promoted, n, more = promote(st, now, n, existed, ARGV[6])
existed = existed or promoted > 0

if mode == 'recheck' then
  -- A place that expired but was not dropped yet (a full key reaps no
  -- waiters) is lost all the same: the token queues again below, behind
  -- those who kept theirs.
  local place = redis.call('ZSCORE', X, token)
  if place and tonumber(place) > now and redis.call('ZSCORE', W, token) then
    local wttl = tonumber(ARGV[5])
    touch(st, wttl)
    save(st)
    redis.call('ZADD', X, now + wttl, token)
    redis.call('PEXPIRE', W, wttl, 'GT')
    redis.call('PEXPIRE', X, wttl, 'GT')
    redis.call('PEXPIRE', I, wttl, 'GT')
    return {0, 0, 0, redis.call('ZRANK', W, token) + 1, next_expiry(), now}
  end
end

-- A recheck finds the grant made while it waited; a try or a wait, one
-- made to a call with its token before (sent again, say, when its reply
-- was lost). H has about limit members.
local held = n > 0 and find_holder(token)
if held then
  local left = tonumber(redis.call('ZSCORE', H, held)) - now
  if left > 0 then
    save(st)
    local fence = string.match(held, '^(%d+):')
    return {1, tonumber(fence), left, 0, 0, now}
  end
  -- The lease ran out before its holder asked (left in H since the key
  -- was not full, so n counted every member; a recheck's waiter never
  -- heard of it): it is held no more. Its slot goes to the queue's head,
  -- and the token asks anew below (a recheck as if its place had
  -- expired). H is gone if it was the last.
  redis.call('ZREM', H, held)
  n = n - 1
  existed = n > 0
  promoted, n, more = promote(st, now, n, existed, ARGV[6])
  existed = existed or promoted > 0
end

-- A recheck whose place expired and has no grant left (a long pause)
-- queues again below.

-- With a free slot, promote() has emptied the queue: nobody is overtaken.
if n < st.limit and not more then
  local fence = new_fence(st, now)
  redis.call('ZADD', H, now + ttl, int(fence) .. ':' .. token)
  expire_at_least(H, ttl, existed)
  touch(st, ttl)
  save(st)
  return {1, fence, ttl, 0, 0, now}
end

if mode == 'try' then
  save(st)
  return {0, 0, 0, 0, next_expiry(), now}
end

local wttl = tonumber(ARGV[5])
-- X and I can exist without W: they also hold give-up marks, which may
-- last longer than this place.
local queued = redis.call('EXISTS', W) == 1
local placed = redis.call('EXISTS', X) == 1
local seq = new_seq(st, now)
touch(st, wttl)
save(st)
redis.call('ZADD', W, seq, token)
redis.call('ZADD', X, now + wttl, token)
redis.call('HSET', I, token, ARGV[2] .. '|' .. ARGV[7])
expire_at_least(W, wttl, queued)
expire_at_least(X, wttl, placed)
expire_at_least(I, wttl, placed)
return {0, 0, 0, redis.call('ZCARD', W), next_expiry(), now}
