// Command baton is Baton's command-line tool: it looks at and administers
// the queues, jobs, concurrency keys and locks that Baton keeps in Redis,
// serves the dashboard, and runs the demonstration.
//
// Install it with
//
//	go install github.com/batonhq/baton/cmd/baton@latest
//
// # Commands
//
//	baton stats                          totals over every queue
//	baton queues                         one line per queue: available (its depth), running,
//	                                     scheduled, retrying, parked, dead, cancelled, completed,
//	                                     dropped (and ever dropped), active keys, paused,
//	                                     how long the oldest available job has waited
//	baton queue pause|resume QUEUE       stop or restart fetching from QUEUE in every process
//	baton jobs list [-q QUEUE] [--state STATE] [--limit N] [--offset N]
//	baton jobs list -q QUEUE --key KEY   the jobs parked for concurrency key KEY, next to run first
//	baton jobs show ID [-q QUEUE]        one job: args, errors, concurrency key, fence
//	baton jobs retry ID... [-q QUEUE]    make jobs available now, attempts reset
//	baton jobs cancel ID... [-q QUEUE]   cancel jobs: queued ones at once, running ones
//	                                     asked to stop (their handlers' contexts cancelled)
//	baton jobs delete ID... [-q QUEUE]   delete jobs that are not running
//	baton dead list [-q QUEUE] [--limit N] [--offset N]
//	                                     the dead set: dead and cancelled jobs
//	baton dead retry (ID... | --all) [-q QUEUE]
//	baton dead purge [-q QUEUE] --yes    delete the dead set
//	baton keys list QUEUE [--limit N] [--offset N]
//	                                     QUEUE's active concurrency keys, most parked first
//	baton key show QUEUE KEY             one key: limit, parked jobs, the jobs holding it
//	baton limit set QUEUE KEY N [--new-key]
//	                                     set a key's limit for every process; 0 halts it
//	baton limit reset QUEUE KEY          remove that override: the jobs' default applies
//	baton locks list [--limit N] [--offset N] [--all]
//	                                     the standalone lock keys in use, by name
//	baton locks show KEY                 a standalone lock's limit, holders and waiters
//	baton schedules [-q QUEUE]           the recurring schedules the clients registered: queue,
//	                                     kind, spec, last tick, next tick, when last seen
//	baton processes [-q QUEUE]           the live worker processes: host, PID, name, running or
//	                                     stopping, busy workers, queues, started, last beat
//	baton functions prune                delete other Baton versions' job functions from Redis
//	baton dash [--addr A] [--writable]   serve the dashboard (batonui) until interrupted
//	baton demo [--redis URL] [--dash [ADDR]] [--no-color]
//	                                     a few hundred jobs, every guarantee checked (in memory
//	                                     without --redis); baton demo locks: the lock demonstration
//	baton completion bash|zsh|fish|powershell
//	                                     the shell's autocompletion script
//	baton help [COMMAND]                 a command's help, as COMMAND --help
//
// Without -q, job commands look in every queue. Every command but demo,
// completion and help takes --json to print JSON for scripts instead of
// tables for people; `dash --json` prints {"url": ..., "writable": ...} once
// it serves.
//
// RETRYING counts the scheduled jobs that have run before (a failed attempt
// waiting for its backoff). The backend keeps no such count, so baton reads
// up to 1000 scheduled jobs per queue; past that the count is a lower bound,
// shown as "12+" (JSON: retrying_exact false).
//
// The job states are scheduled, parked, available, running, completed,
// cancelled, dead and dropped. A parked job waits for a slot of its
// concurrency key and is invisible to fetchers; a dropped one found its key
// busy and its OnBusy policy dropped it (docs/concurrency.md).
//
// # Concurrency keys
//
// A concurrency key belongs to a queue, so the per-key commands take the
// queue first. A key may hold any bytes: it is always one argument, so quote
// it for the shell when it has spaces or braces ('customer:{acme} eu'), and
// put one that starts with '-' after '--'. Tables show a key as it is, or
// Go-quoted when it has tabs, newlines or other unprintable bytes, and put it
// in the last column; JSON carries it as a string, plus key_base64 when it is
// not valid UTF-8.
//
//	$ baton keys list webhooks
//	HOLDERS  RUNNING  PARKED  OLDEST WAIT  LIMIT         LAST FENCE        KEY
//	2        2        41      3m           2             1843320948457473  customer:acme
//	0        0        7       12s          halted        1843320931211266  customer:{globex} eu
//	1        1        0       -            5 (override)  1843320950000641  customer:initech
//	(3 active keys)
//
// LIMIT is the key's override, set with `limit set` (marked "(override)",
// or "halted" for 0), else the default limit its jobs carry. `keys list`
// shows the active keys: those with holders, parked jobs or an override.
// LAST FENCE is the newest fencing token among the key's running jobs. An
// idle key keeps no state, so `key show` and `limit reset` exit 3 for a key
// that is not active; so does `limit set`, unless given --new-key (to halt
// or limit a key that has no jobs now). The limit N is a
// whole number from 0 to 2147483647 (baton.MaxKeyLimit); anything else is
// bad usage (exit code 2).
//
// `locks list` shows the standalone lock keys in use — with holders, waiters
// or a limit set at runtime — in byte order, from the index of lock keys the
// processes keep as they lock (PREFIX:locks), not from a scan; the listing
// removes the idle keys it meets from it. `locks show` reads any one key.
//
// # Schedules
//
// The recurring schedules live in the applications' Config.PeriodicJobs;
// started clients register them in the backend, in the queue their jobs go
// to, and `schedules` lists those registrations. A client registers a
// schedule at its first tick, and at once when it starts if the schedule
// was registered before; it renews it every 5 minutes, so SEEN older than
// that means no running client has the schedule. A registration nobody
// renewed for a week is dropped. NEXT TICK is computed from the spec
// ("every 15m0s" or a cron spec); it is "-" for a schedule type of the
// application's own.
//
// # Processes
//
// Every started client keeps a record of itself in Redis: it records
// itself at Start, renews the record every Config.ProcessTTL/3 (10s by
// default) with the workers it has in use then, and removes it when its
// Stop returns. `processes` lists the records that are live, by host then
// PID: a process that crashed or lost Redis drops out ProcessTTL (30s by
// default) after its last beat, by Redis's clock. BUSY is its workers in
// use of its Config.Concurrency at that beat; QUEUES shows its queues with
// their weights ("critical=6 default=3") or, with StrictPriority, in
// order ("critical > default"), and ",max=N" after a queue whose
// QueueConfig.MaxWorkers caps its workers; STATE is stopping once its
// Stop has begun.
//
// # Connecting
//
// --redis URL (or the environment variable BATON_REDIS_URL) names the Redis;
// it is required by every command that reads or changes Baton's data. The
// URL is parsed by rueidis.ParseURL:
//
//	standalone  redis://[user:password@]host:port[/db]
//	TLS         rediss://host:port (add ?skip_verify=true to skip
//	            certificate checks, or --tls-ca FILE for a private CA)
//	Sentinel    redis://sentinel1:26379?addr=sentinel2:26379&master_set=NAME
//	            (credentials in the URL are the master's; the sentinels'
//	            are sentinel_username= and sentinel_password=; rediss://
//	            uses TLS for the sentinels too)
//	Cluster     several addresses: --redis redis://node1:7000,node2:7000,node3:7000,
//	            or --redis given once per node, or ?addr=node2:7000&addr=...
//	            (one address of a cluster is enough too: the rest are discovered)
//
// In a list, the first entry is a full URL (a bare host:port means
// redis://host:port) and carries the options, credentials and database; the
// others give only host:port (a comma is always a separator). --prefix
// (BATON_PREFIX) is the key prefix the applications use, "baton" by
// default. --timeout bounds a command's work with Redis, 30s by default (0:
// no bound); past it the command fails with exit code 4. `dash` is bounded
// only while it connects: it serves until interrupted.
//
// # Exit codes
//
//	0  success
//	1  the operation failed (the backend refused it, e.g. deleting a running job)
//	2  bad usage: unknown command or flag, bad number, bad URL, missing argument
//	3  not found: no such queue, job or lock key, or a concurrency key not active
//	4  backend unreachable: cannot connect to Redis, or it did not answer within --timeout
//	5  not available: the command exists but cannot work yet (none at present)
//
// `baton demo` keeps its own codes: 0 if every guarantee held, 1 otherwise
// (including a bad or unreachable --redis), 2 for a bad flag.
//
// Errors go to standard error, as one line of text, or with --json as an
// object {"error": "...", "exit_code": N}. Nothing prints a stack trace.
package main
