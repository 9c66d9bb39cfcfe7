-- setlimit.lua: store or remove the key's limit override, and grant slots a
-- raised limit frees to waiters in the same step.
--
-- KEYS: H W X I C (see lib.lua)
-- ARGV[1] new limit (0 halts the key), or "" to remove the override
-- ARGV[2] channel prefix for grant notices
--
-- Returns the number of waiters granted.
if ARGV[1] == '' then
  redis.call('HDEL', C, 'limit')
else
  redis.call('HSET', C, 'limit', ARGV[1])
end
return settle(now_ms(), load(nil), ARGV[2])
