-- key_list.lua: a page of the queue's active concurrency keys (with
-- holders, parked jobs or an override), most parked first, then by key.
-- Changes nothing.
--
-- KEYS: the queue keys (see joblib.lua). This script builds concurrency
-- keys' keys from K and job keys from J: the keys come from KI, the jobs
-- from their holders sets and the holders' next fields (see the exception
-- in joblib.lua).
-- ARGV[1] offset
-- ARGV[2] limit
--
-- Returns {total, then per key the key and its key_info (joblib.lua),
-- without holders}. KI's score is minus the parked count, so its order is
-- the listing's.
local offset, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {redis.call('ZCARD', KI)}
for _, k in ipairs(redis.call('ZRANGE', KI, offset, offset + limit - 1)) do
  out[#out + 1] = k
  out[#out + 1] = key_info(k, false)
end
return out
