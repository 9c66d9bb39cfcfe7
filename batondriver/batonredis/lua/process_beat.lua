-- process_beat.lua: record a worker process, or renew its record
-- (batondriver.ProcessDriver.ProcessBeat), and drop up to 100 expired
-- records of any process.
--
-- KEYS[1] E  sorted set: process ID -> when its record expires (server ms)
-- KEYS[2] R  hash: process ID -> its record, "started|seen|json": started
--            and seen are server ms, json the process's own fields, which
--            no script reads
-- Both carry the hash tag {processes}: the registry belongs to no queue,
-- and bind({}) leaves every queue key of joblib.lua unset, so that a use
-- of one fails instead of touching a key of this call.
-- ARGV[1] the process ID
-- ARGV[2] ttl (ms): the record expires that long after now
-- ARGV[3] the record's json
--
-- Returns {server ms, 1 if the record is new (there was none, or it had
-- expired: its score was not after now), else 0}. "started" is kept from a
-- live record and is now for a new one; "seen" becomes now. E and R expire
-- (PEXPIREAT) with the latest record, so that nothing outlives the
-- records when every process stops beating.
bind({})
local E, R = KEYS[1], KEYS[2]
local id, ttl, json = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local now = now_ms()
local started, created = now, 1
local until_ms = tonumber(redis.call('ZSCORE', E, id))
if until_ms and until_ms > now then
  local s = string.match(redis.call('HGET', R, id) or '', '^(%d+)|')
  if s then
    started, created = tonumber(s), 0
  end
end
local dead = redis.call('ZRANGE', E, '-inf', int(now), 'BYSCORE', 'LIMIT', 0, 100)
if #dead > 0 then
  redis.call('ZREM', E, unpack(dead))
  redis.call('HDEL', R, unpack(dead))
end
redis.call('ZADD', E, int(now + ttl), id)
redis.call('HSET', R, id, int(started) .. '|' .. int(now) .. '|' .. json)
local last = int(tonumber(redis.call('ZRANGE', E, -1, -1, 'WITHSCORES')[2]))
redis.call('PEXPIREAT', E, last)
redis.call('PEXPIREAT', R, last)
return {now, created}
