-- inspect.lua: read a key's state. Changes nothing.
--
-- KEYS: H W X I C (see lib.lua)
-- ARGV[1] most waiters to list
--
-- Returns {server ms, limit override or false, default limit or false,
-- last fence or false, {member, expiry, ...} of unexpired holders,
-- {token, place expiry, ...} of unexpired waiters in order, waiter count}.
local now = now_ms()
local cfg = redis.call('HMGET', C, 'limit', 'dlimit', 'fence')
local holders = redis.call('ZRANGE', H, '(' .. now, '+inf', 'BYSCORE', 'WITHSCORES')
local waiters = {}
local count = 0
for _, token in ipairs(redis.call('ZRANGE', W, 0, -1)) do
  local exp = redis.call('ZSCORE', X, token)
  if exp and tonumber(exp) > now then
    count = count + 1
    if count <= tonumber(ARGV[1]) then
      table.insert(waiters, token)
      table.insert(waiters, exp)
    end
  end
end
return {now, cfg[1], cfg[2], cfg[3], holders, waiters, count}
