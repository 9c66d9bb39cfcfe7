package batonredis

import (
	"sync"

	"github.com/batonhq/baton/batondriver"
)

// The job keys; docs/redis-keys.md describes them. A queue Q under prefix P
// owns these names, all sharing the hash tag {Q} so that every transition of
// the queue touches one Redis Cluster slot:
//
//	P:queue:{Q}:job:ID             hash: one job (fields in lua/joblib.lua)
//	P:queue:{Q}:available:N        list: available job IDs of priority N (0-9), head first
//	P:queue:{Q}:scheduled          sorted set: ID, score = run_at (server ms)
//	P:queue:{Q}:running            sorted set: ID, score = lease_until (server ms)
//	P:queue:{Q}:completed          sorted set: ID, score = when to delete it (server ms)
//	P:queue:{Q}:dead               sorted set: ID, score = finished (server ms)
//	P:queue:{Q}:cancelled          sorted set: ID, score = finished (server ms)
//	P:queue:{Q}:meta               hash: paused, dropped, schedules' ticks, fence, aN (list N may hold jobs) (kept forever)
//	P:queue:{Q}:wake               list: wake tokens for JobWait (at most 1000)
//	P:queue:{Q}:keys               sorted set: active concurrency keys, score = -(parked count)
//	P:queue:{Q}:parked             sorted set: parked job IDs, score = parked at (server ms)
//	P:queue:{Q}:dropped            sorted set: dropped job IDs, score = finished (server ms)
//	P:queue:{Q}:unique             hash: class:unique key -> "0:ID" of the job that claims it ("expiry:at:ID" for a period)
//	P:queue:{Q}:unique_periods     sorted set: unique's fields of period claims, score = expiry (server ms)
//	P:queue:{Q}:key:K:h            set: holders of concurrency key K (available and running job IDs)
//	P:queue:{Q}:key:K:p            list: parked job IDs of K, head first
//	P:queue:{Q}:key:K:m            hash: def (default limit), limit (override), mixed (deleted when K goes idle)
//	P:queue:{Q}:lease:NAME:N       string: a leasing call's record (leaserecords.go)
//	P:queue:{Q}:schedules          hash: registered recurring schedule name -> JSON record (schedules.go)
//	P:queues                       set: every queue name ever inserted into (kept forever)
//
// and one shard channel, in the queue's slot:
//
//	P:queue:{Q}:notices            recalls of chained jobs "fence|K", cancels "c|ID" (QueueListen)
//
// A concurrency key K is any string of 1 to 512 bytes, used as it is: the
// hash tag is the first {...} of the name, {Q}, whatever K holds, and the
// fixed suffixes keep the three keys of different Ks apart.
//
// Queue names are restricted (checkQueue) so that they need no encoding and
// read as themselves in redis-cli.

// queueKeys are the keys of one queue, in the order the job scripts expect
// them (lua/joblib.lua), followed by job keys where a script takes them.
type queueKeys struct {
	base string   // "P:queue:{Q}:"
	keys []string // the fifteen queue keys
}

// The positions of the queue keys in queueKeys.keys.
const (
	keyMeta      = iota
	keyAvailable // "P:queue:{Q}:available:", the prefix of the available lists
	keyScheduled
	keyRunning
	keyCompleted
	keyDead
	keyCancelled
	keyWake
	keyJobPrefix // "P:queue:{Q}:job:", a key prefix, not a key (see joblib.lua)
	keyKeyPrefix // "P:queue:{Q}:key:", likewise
	keyKeys
	keyParked
	keyDropped
	keyUnique
	keyUniquePeriods
	numQueueKeys
)

// queueKeys returns the keys of queue, from the cache when it has them.
// Callers must not change the slice: it may be shared.
func (d *Driver) queueKeys(queue string) queueKeys {
	return d.keyCache.get(queue, d.buildQueueKeys)
}

// keyCache keeps the keys of up to maxCachedQueues queues, so that the job
// calls, which take fifteen queue keys each, do not build them on every
// call. It is reset when full, so a process that works ever new queue
// names holds a bounded set of them.
type keyCache struct {
	mu sync.RWMutex
	m  map[string]queueKeys
}

const maxCachedQueues = 1024

func (c *keyCache) get(queue string, build func(string) queueKeys) queueKeys {
	c.mu.RLock()
	k, ok := c.m[queue]
	c.mu.RUnlock()
	if ok {
		return k
	}
	k = build(queue)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxCachedQueues {
		c.m = make(map[string]queueKeys)
	}
	c.m[queue] = k
	c.mu.Unlock()
	return k
}

func (d *Driver) buildQueueKeys(queue string) queueKeys {
	base := d.prefix + ":queue:{" + queue + "}:"
	return queueKeys{
		base: base,
		keys: []string{
			keyMeta:          base + "meta",
			keyAvailable:     base + "available:",
			keyScheduled:     base + "scheduled",
			keyRunning:       base + "running",
			keyCompleted:     base + "completed",
			keyDead:          base + "dead",
			keyCancelled:     base + "cancelled",
			keyWake:          base + "wake",
			keyJobPrefix:     base + "job:",
			keyKeyPrefix:     base + "key:",
			keyKeys:          base + "keys",
			keyParked:        base + "parked",
			keyDropped:       base + "dropped",
			keyUnique:        base + "unique",
			keyUniquePeriods: base + "unique_periods",
		},
	}
}

// job returns the key of job id.
func (k queueKeys) job(id string) string { return k.keys[keyJobPrefix] + id }

// noticeChannel is the queue's shard channel for its notices (QueueListen).
func (k queueKeys) noticeChannel() string { return k.base + "notices" }

// withJobs returns the queue keys followed by the keys of ids, for a script
// that names its jobs in KEYS.
func (k queueKeys) withJobs(ids ...string) []string {
	keys := make([]string, 0, numQueueKeys+len(ids))
	keys = append(keys, k.keys...)
	for _, id := range ids {
		keys = append(keys, k.job(id))
	}
	return keys
}

// withSchedules returns the queue keys followed by the queue's schedules
// hash, for the schedule scripts (KEYS[16]).
func (k queueKeys) withSchedules() []string {
	keys := make([]string, 0, numQueueKeys+1)
	keys = append(keys, k.keys...)
	return append(keys, k.base+"schedules")
}

// queuesKey is the set of queue names.
func (d *Driver) queuesKey() string { return d.prefix + ":queues" }

// checkQueue reports whether queue is a valid name
// (batondriver.CheckQueue).
func checkQueue(queue string) error {
	return batondriver.CheckQueue(queue)
}
