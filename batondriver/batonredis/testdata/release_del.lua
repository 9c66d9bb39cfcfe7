-- release_del.lua: BROKEN ON PURPOSE, for the contention tests only.
-- The contract of lua/release.lua, but a holder gives its slot back the way a
-- naive lock does, with a plain DEL of the key: the whole holders set H is
-- deleted, without checking the token, so every other holder of a semaphore
-- silently loses its slot and the freed slots go to waiters at once.
--
-- KEYS: H W X I C (see lib.lua)
-- ARGV[1] token
-- ARGV[2] fence of the held lease, or "0" for a waiter giving up that may
--         have been granted meanwhile
-- ARGV[3] channel prefix for grant notices
-- ARGV[4] (unused here) give-up mark TTL, ARGV[5] idle TTL, as for release.lua
--
-- Returns {released (1 if H existed), waiters granted}.
local token = ARGV[1]
local released = 0

if ARGV[2] == '0' and redis.call('ZREM', W, token) == 1 then
  redis.call('ZREM', X, token)
  redis.call('HDEL', I, token)
elseif redis.call('DEL', H) == 1 then -- BROKEN: no token check, drops every holder
  released = 1
end

local promoted = 0
if redis.call('EXISTS', W) == 1 then
  local now = now_ms()
  promoted = settle(now, load(nil, tonumber(ARGV[5]), now), ARGV[3])
end
return {released, promoted}
