-- schedule_register.lua: record a recurring schedule in the queue, or
-- refresh its record, and drop the queue's expired records.
--
-- KEYS: the queue keys (see joblib.lua), then KEYS[16] the queue's
-- schedules hash: name -> record, the JSON object {"spec", "kind",
-- "registered", "seen", "expires"} (times as server ms in strings).
-- ARGV[1] the schedule's name
-- ARGV[2] its spec ("" if unknown)
-- ARGV[3] the kind of its jobs ("" keeps the kind recorded)
-- ARGV[4] ttl (ms): the record expires that long after now
--
-- Returns the server's time (ms). "registered" is kept from the record
-- being refreshed; "seen" becomes now and "expires" now + ttl. A record
-- that does not decode is dropped like an expired one. The hash expires
-- with its latest record (PEXPIREAT), so that nothing outlives them.
local H = KEYS[16]
local name, spec, kind = ARGV[1], ARGV[2], ARGV[3]
local now = now_ms()
local expires = now + tonumber(ARGV[4])
local registered, latest = now, expires
local all = redis.call('HGETALL', H)
for i = 1, #all, 2 do
  local ok, r = pcall(cjson.decode, all[i + 1])
  local until_ms = ok and type(r) == 'table' and tonumber(r.expires)
  if not until_ms or until_ms <= now then
    redis.call('HDEL', H, all[i])
  elseif all[i] == name then
    registered = tonumber(r.registered) or now
    if kind == '' then kind = r.kind or '' end
  elseif until_ms > latest then
    latest = until_ms
  end
end
redis.call('HSET', H, name, cjson.encode({spec = spec, kind = kind,
  registered = int(registered), seen = int(now), expires = int(expires)}))
redis.call('PEXPIREAT', H, int(latest))
return now
