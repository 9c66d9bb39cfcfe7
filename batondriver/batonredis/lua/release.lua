-- release.lua: a token leaves the key, holding or waiting, and the slot it
-- frees goes to the next waiters in the same step.
--
-- KEYS: H W X I C (see lib.lua)
-- ARGV[1] token
-- ARGV[2] fence of the held lease, or "0" for a waiter giving up that may
--         have been granted meanwhile
-- ARGV[3] channel prefix for grant notices
-- ARGV[4] default limit given by the caller
--
-- Returns {released (1 if token held an unexpired slot), waiters granted}.
local token = ARGV[1]
local now = now_ms()
local released = 0

local member
if ARGV[2] ~= '0' then
  member = ARGV[2] .. ':' .. token
elseif redis.call('ZREM', W, token) == 1 then
  redis.call('ZREM', X, token)
  redis.call('HDEL', I, token)
else
  member = find_holder(token)
end

if member then
  local exp = redis.call('ZSCORE', H, member)
  if exp then
    redis.call('ZREM', H, member)
    if tonumber(exp) > now then released = 1 end
  end
end

local promoted = 0
if redis.call('EXISTS', W) == 1 then
  local cfg = redis.call('HMGET', C, 'limit', 'dlimit')
  promoted = settle(now, limit_of(cfg[1], cfg[2] or ARGV[4]), ARGV[3])
end
return {released, promoted}
