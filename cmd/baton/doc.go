// Command baton is Baton's command-line tool: it looks at and administers
// the queues, jobs and locks that Baton keeps in Redis, and runs the lock
// demonstration.
//
// Install it with
//
//	go install github.com/batonhq/baton/cmd/baton@latest
//
// # Commands
//
//	baton stats                          totals over every queue
//	baton queues                         one line per queue: available (its depth), running,
//	                                     scheduled, retrying, dead, cancelled, completed, paused
//	baton queue pause|resume QUEUE       stop or restart fetching from QUEUE in every process
//	baton jobs list [-q QUEUE] [--state STATE] [--limit N] [--offset N]
//	baton jobs show ID [-q QUEUE]        one job with its args and errors
//	baton jobs retry ID... [-q QUEUE]    make jobs available now, attempts reset
//	baton jobs delete ID... [-q QUEUE]   delete jobs that are not running
//	baton dead list [-q QUEUE]           the dead set: dead and cancelled jobs
//	baton dead retry (ID... | --all) [-q QUEUE]
//	baton dead purge [-q QUEUE] --yes    delete the dead set
//	baton locks show KEY                 a standalone lock's limit, holders and waiters
//	baton schedules                      not available: see its help
//	baton dash                           not available yet: the dashboard is being built
//	baton demo [--redis URL]             the lock demonstration (in memory without --redis)
//
// Without -q, job commands look in every queue. Every command but demo
// takes --json to print JSON for scripts instead of tables for people.
//
// RETRYING counts the scheduled jobs that have run before (a failed attempt
// waiting for its backoff). The backend keeps no such count, so baton reads
// up to 1000 scheduled jobs per queue; past that the count is a lower bound,
// shown as "12+" (JSON: retrying_exact false).
//
// Not there yet: `locks list` (no backend keeps an index of lock keys), and
// the per-key commands of job concurrency keys (keys list, key show, limit
// set and reset), which come with the key API.
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
// others give only host:port (a comma is always a separator). --prefix (BATON_PREFIX) is the key prefix the
// applications use, "baton" by default.
//
// # Exit codes
//
//	0  success
//	1  the operation failed (the backend refused it, e.g. deleting a running job)
//	2  bad usage: unknown command or flag, bad number, bad URL, missing argument
//	3  not found: no such queue, job or lock key
//	4  backend unreachable: cannot connect to Redis, or it did not answer in time
//	5  not available: the command exists but cannot work yet (schedules, dash)
//
// `baton demo` keeps its own codes: 0 if every guarantee held, 1 otherwise
// (including a bad or unreachable --redis), 2 for a bad flag.
//
// Errors go to standard error, as one line of text, or with --json as an
// object {"error": "...", "exit_code": N}. Nothing prints a stack trace.
package main
