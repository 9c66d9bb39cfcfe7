-- process_remove.lua: remove a worker process's record, live or expired
-- (batondriver.ProcessDriver.ProcessRemove).
--
-- KEYS[1] E, KEYS[2] R: the process registry (see process_beat.lua).
-- ARGV[1] the process ID
--
-- Returns 1 if there was a record, else 0. E and R vanish with their last
-- member.
bind({})
local E, R = KEYS[1], KEYS[2]
redis.call('ZREM', E, ARGV[1])
return redis.call('HDEL', R, ARGV[1])
