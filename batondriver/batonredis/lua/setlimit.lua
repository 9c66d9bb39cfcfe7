-- setlimit.lua: store or remove the key's limit override, and grant slots a
-- raised limit frees to waiters in the same step.
--
-- KEYS: H W X I C (see lib.lua)
-- ARGV[1] new limit (0 halts the key), or "" to remove the override
-- ARGV[2] channel prefix for grant notices
-- ARGV[3] the driver's idle TTL in ms (see C in lib.lua)
--
-- Returns the number of waiters granted. A key with an override keeps C
-- with no expiry; once the override is removed C expires again, the idle
-- TTL after the longest lease or place it still covers.
local now = now_ms()
if ARGV[1] == '' then
  redis.call('HDEL', C, 'limit', 'exp')
else
  redis.call('HSET', C, 'limit', ARGV[1])
  redis.call('PERSIST', C)
end
local st = load(nil, tonumber(ARGV[3]), now)
if not st.override and redis.call('EXISTS', C) == 1 then
  local longest = 0
  local last = redis.call('ZRANGE', H, 0, 0, 'REV', 'WITHSCORES')
  if last[2] then longest = math.max(longest, tonumber(last[2]) - now) end
  local places = redis.call('ZRANGE', X, 0, 0, 'REV', 'WITHSCORES')
  if places[2] then longest = math.max(longest, tonumber(places[2]) - now) end
  touch(st, longest)
end
return settle(now, st, ARGV[2])
