-- key_get.lua: the state of one concurrency key. Changes nothing.
--
-- KEYS: the queue keys (see joblib.lua). This script builds the concurrency
-- key's keys from K, and from J the job keys of its holders and of the
-- jobs their next fields name (see the exception in joblib.lua).
-- ARGV[1] the concurrency key
--
-- Returns key_info (joblib.lua) with holders.
return key_info(ARGV[1], true)
