-- schedule_list.lua: the queue's registered recurring schedules, each with
-- the last tick inserted under its name. Drops the expired records, and
-- changes nothing else.
--
-- KEYS: the queue keys (see joblib.lua), then KEYS[16] the queue's
-- schedules hash (see schedule_register.lua).
--
-- Returns {server ms, then per record its name, its JSON and the last tick
-- (ms, from M's "once:<name>") or false}, in no order. A record that does
-- not decode is dropped like an expired one.
local H = KEYS[16]
local now = now_ms()
local out = {now}
local all = redis.call('HGETALL', H)
for i = 1, #all, 2 do
  local ok, r = pcall(cjson.decode, all[i + 1])
  local until_ms = ok and type(r) == 'table' and tonumber(r.expires)
  if not until_ms or until_ms <= now then
    redis.call('HDEL', H, all[i])
  else
    out[#out + 1] = all[i]
    out[#out + 1] = all[i + 1]
    out[#out + 1] = redis.call('HGET', M, 'once:' .. all[i]) or false
  end
end
return out
