-- release.lua: a token leaves the key, holding or waiting, and the slot it
-- frees goes to the next waiters in the same step.
--
-- KEYS: H W X I C (see lib.lua)
-- ARGV[1] token
-- ARGV[2] fence of the held lease, or "0" for a waiter giving up that may
--         have been granted meanwhile
-- ARGV[3] channel prefix for grant notices
-- ARGV[4] for a waiter giving up: how long to remember that it gave up (ms;
--         "0": not at all)
-- ARGV[5] the driver's idle TTL in ms (see C in lib.lua)
--
-- Returns {released, waiters granted}. released is 1 if the token still held
-- its slot: no transition had reclaimed it, so nobody else had it since. (A
-- lease that expired but was not reclaimed yet counts as held: expired
-- holders are removed only when they stand in someone's way.)
--
-- A waiter that gives up may have an acquire still on its way, sent before
-- and run after this (sent again after NOSCRIPT, say), which would queue it
-- again or grant it a slot nobody uses. So it is marked gone, which
-- acquire.lua honours: I maps it to GONE, and X keeps it, but not W, until
-- the mark expires (see reap_waiters).
local token = ARGV[1]
local released = 0

if ARGV[2] ~= '0' then
  released = redis.call('ZREM', H, ARGV[2] .. ':' .. token)
else
  local waited = redis.call('ZREM', W, token) == 1
  if not waited then
    local member = find_holder(token)
    if member then
      released = redis.call('ZREM', H, member)
    end
  end
  local wttl = tonumber(ARGV[4])
  if wttl > 0 then
    local existed = redis.call('EXISTS', X) == 1
    redis.call('ZADD', X, now_ms() + wttl, token)
    redis.call('HSET', I, token, GONE)
    expire_at_least(X, wttl, existed)
    expire_at_least(I, wttl, existed)
  elseif waited then
    redis.call('ZREM', X, token)
    redis.call('HDEL', I, token)
  end
end

local promoted = 0
if redis.call('EXISTS', W) == 1 then
  local now = now_ms()
  promoted = settle(now, load(nil, tonumber(ARGV[5]), now), ARGV[3])
end
return {released, promoted}
