-- job_pause.lua: pause or resume fetching from the queue.
--
-- KEYS: the queue keys (see joblib.lua)
-- ARGV[1] "1" to pause, "0" to resume
--
-- Returns 0. Resuming wakes one waiting fetcher per available job (at most
-- 64).
if ARGV[1] == '1' then
  redis.call('HSET', M, 'paused', '1')
elseif redis.call('HDEL', M, 'paused') == 1 then
  wake(available_count(available_bands()))
end
return 0
