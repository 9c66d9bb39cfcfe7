-- process_list.lua: the live worker processes
-- (batondriver.ProcessDriver.ProcessList). Drops every expired record
-- first, and changes nothing else.
--
-- KEYS[1] E, KEYS[2] R: the process registry (see process_beat.lua).
--
-- Returns {server ms, then per live record its ID, its expiry (server ms)
-- and its record "started|seen|json"}, every element a string, by expiry.
-- A record is live while its expiry is after now. An ID in E without a
-- record in R (which no script leaves) is dropped like an expired one.
bind({})
local E, R = KEYS[1], KEYS[2]
local now = now_ms()
while true do
  local dead = redis.call('ZRANGE', E, '-inf', int(now), 'BYSCORE', 'LIMIT', 0, 1000)
  if #dead == 0 then break end
  redis.call('ZREM', E, unpack(dead))
  redis.call('HDEL', R, unpack(dead))
end
local out = {int(now)}
local live = redis.call('ZRANGE', E, 0, -1, 'WITHSCORES')
-- HMGET a thousand records at a time: unpack has a limit.
for i = 1, #live, 2000 do
  local ids, scores = {}, {}
  for j = i, math.min(i + 1998, #live - 1), 2 do
    ids[#ids + 1] = live[j]
    scores[#scores + 1] = live[j + 1]
  end
  local recs = redis.call('HMGET', R, unpack(ids))
  for k = 1, #ids do
    if recs[k] then
      out[#out + 1] = ids[k]
      out[#out + 1] = scores[k]
      out[#out + 1] = recs[k]
    else
      redis.call('ZREM', E, ids[k])
    end
  end
end
return out
