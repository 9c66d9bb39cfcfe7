-- release.lua: a token leaves the key, holding or waiting, and the slot it
-- frees goes to the next waiters in the same step.
--
-- KEYS: H W X I C (see lib.lua)
-- ARGV[1] token
-- ARGV[2] fence of the held lease, or "0" for a waiter giving up that may
--         have been granted meanwhile
-- ARGV[3] channel prefix for grant notices
--
-- Returns {released, waiters granted}. released is 1 if the token still held
-- its slot: no transition had reclaimed it, so nobody else had it since. (A
-- lease that expired but was not reclaimed yet counts as held: expired
-- holders are removed only when they stand in someone's way.)
local token = ARGV[1]
local released = 0

if ARGV[2] ~= '0' then
  released = redis.call('ZREM', H, ARGV[2] .. ':' .. token)
elseif redis.call('ZREM', W, token) == 1 then
  redis.call('ZREM', X, token)
  redis.call('HDEL', I, token)
else
  local member = find_holder(token)
  if member then
    released = redis.call('ZREM', H, member)
  end
end

local promoted = 0
if redis.call('EXISTS', W) == 1 then
  promoted = settle(now_ms(), load(nil), ARGV[3])
end
return {released, promoted}
