-- job_insert_one.lua: add one job with neither concurrency key nor unique
-- key, due now and for no schedule: what job_insert.lua does for such a
-- job, the most common insert, with only the keys and arguments it needs,
-- so that the call costs less to send and to unpack (docs/benchmarks.md,
-- table 4c).
--
-- KEYS: M, A and W (see joblib.lua), then the job's key.
-- ARGV: id, kind, args, priority, max attempts, tags (JSON or ""),
-- metadata (or "").
--
-- Returns the server ms: the job is AVAILABLE (job_insert.lua would reply
-- {server ms, AVAILABLE}; a table costs the server about 2 µs more to
-- reply than a number, docs/benchmarks.md). One waiting fetcher is woken.
bind_one(KEYS)
local now = now_ms()
local snow = int(now)
store_plain(KEYS[4], ARGV, 0, snow, 'available', snow)
push_band(tonumber(ARGV[4]), {ARGV[1]})
wake(1)
return now
