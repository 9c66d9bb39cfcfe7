-- extend.lua: set a held, unexpired lease to expire TTL from now.
--
-- KEYS: H W X I C (see lib.lua)
-- ARGV[1] holder member "fence:token"
-- ARGV[2] TTL in ms
-- ARGV[3] channel prefix for grant notices
-- ARGV[4] the driver's idle TTL in ms (see C in lib.lua)
--
-- Returns {extended (0|1), server ms}. An expired lease is never extended:
-- if it is still listed it is removed and its slot handed on. C is kept
-- until the extended lease ends and the idle TTL beyond (touch in lib.lua).
local member, ttl = ARGV[1], tonumber(ARGV[2])
local now = now_ms()
local exp = redis.call('ZSCORE', H, member)
if not exp then
  return {0, now}
end
if tonumber(exp) <= now then
  redis.call('ZREM', H, member)
  settle(now, load(nil, tonumber(ARGV[4]), now), ARGV[3])
  return {0, now}
end
redis.call('ZADD', H, 'XX', now + ttl, member)
redis.call('PEXPIRE', H, ttl, 'GT')
local st = load(nil, tonumber(ARGV[4]), now)
touch(st, ttl)
save(st)
return {1, now}
