package batondriver

import (
	"context"
	"fmt"
	"math"
	"time"
)

// KeyDriver is the per-key concurrency half of a job backend: the admin
// side of the concurrency keys that JobInsert, JobFetch and JobFinish
// enforce. docs/concurrency.md explains the model; in short:
//
//   - A job with a Key holds one of its key's slots from the moment it
//     becomes available until it leaves running (completed, retried,
//     snoozed, cancelled, dead, again, deleted, or its expired lease taken
//     back). A job is admitted — made available and counted — only while its
//     key holds fewer than its limit and nobody is parked before it;
//     otherwise its OnBusy policy applies: it is parked (Wait), dropped
//     (Drop), scheduled later (Reschedule) or refused (Fail). A chained job
//     (JobFetchParams.Chain) is the exception: it leaves the parked jobs
//     when it is leased behind a holder, and holds a slot only once it takes
//     over that holder's.
//   - Every transition that frees slots promotes as many parked jobs, in
//     park order, as slots became free, in the same atomic step, and wakes
//     one fetcher per job promoted and left available (one that the same
//     call leases wakes nobody: see JobDriver.JobWait). So does a chain
//     that leaves at the head of the parked jobs one whose own default
//     limit, larger than the chained job's, admits it beside the holders.
//   - A key's limit is the override stored with KeySetLimit if any, else the
//     default limit carried by the job being admitted. 0 halts the key.
//   - Each key has a fencing token, strictly increasing across the key's
//     leases: a fetch gives each keyed job max(last+1, backend ms × 1024).
//
// All state of a key lives with its queue (on Redis, under the queue's hash
// tag), so every step is atomic with the job transitions.
type KeyDriver interface {
	// KeySetLimit stores (or, with Reset, removes) the limit override of a
	// key of a queue. Raising the limit promotes parked jobs at once;
	// lowering it (0 halts) moves the key's available jobs beyond the new
	// limit back to the head of its parked queue, the least urgent first
	// and of a priority the newest first, so that jobs not yet started
	// wait; running jobs finish. Jobs chained behind the running ones are
	// left as they are, and recalled (JobDriver.QueueListen) if the key is left over
	// its limit. It returns the key's state after the change.
	KeySetLimit(ctx context.Context, p *KeySetLimitParams) (*KeyInfo, error)

	// KeyGet returns a key's state with its holders, or ErrKeyNotFound for
	// a key that is not active: one without holders, parked jobs or an
	// override keeps no state. Fences keep rising across a key's idle
	// spells all the same, as they come from the queue.
	KeyGet(ctx context.Context, p *KeyParams) (*KeyInfo, error)

	// KeyList lists a queue's active keys — those with holders, parked jobs
	// or an override — most parked first, a page at a time, from an index:
	// its cost is O(log n + Limit × the keys' holders), not a scan. Holders
	// are not filled in; the counts, Chained included, are. (A key with
	// chained jobs has holders, so it is active.)
	KeyList(ctx context.Context, p *KeyListParams) (*KeyListResult, error)
}

// OnBusy is what happens to a job whose key is busy when it is admitted:
// its key holds its limit already, or other jobs of the key are parked.
type OnBusy string

// The on-busy policies. They apply to the job's first admission — its
// insert, or the moment a delayed insert becomes due. A job admitted again
// later (a retry, snooze, Again, or a recovered lease) always waits: it is
// never dropped after it was accepted.
const (
	// OnBusyWait parks the job, invisible to fetchers, until a slot frees.
	// The default.
	OnBusyWait OnBusy = "wait"
	// OnBusyDrop ends the job at once in state dropped, with the reason
	// recorded: for "drop me if my twin runs".
	OnBusyDrop OnBusy = "drop"
	// OnBusyReschedule schedules the job BusyDelay later, without counting
	// an attempt; it is admitted again then.
	OnBusyReschedule OnBusy = "reschedule"
	// OnBusyFail stores nothing and reports the insert Rejected. A delayed
	// job that finds its key busy when due is dropped instead, since its
	// insert already succeeded.
	OnBusyFail OnBusy = "fail"
)

// UniqueScope is when two jobs with the same unique key conflict.
type UniqueScope string

// The uniqueness scopes. A job is queued while scheduled, available or
// parked.
const (
	// UniqueQueued: an insert conflicts with a queued twin.
	UniqueQueued UniqueScope = "queued"
	// UniqueRunning: an insert conflicts with a running twin. (To keep
	// twins from running at once, give them a concurrency key of limit 1.)
	// The job claims the key when it starts and releases it when it leaves
	// running; among twins unique while running, the one that started last
	// holds the claim. Claims of different scopes are kept apart: a job
	// never takes or ends a twin's claim of another scope.
	UniqueRunning UniqueScope = "running"
	// UniqueUntilDone: an insert conflicts with a queued or running twin.
	UniqueUntilDone UniqueScope = "until_done"
	// UniquePeriod: an insert conflicts with a twin that claimed the key
	// less than the insert's Period before, while the twin's own claim
	// lasts (its Period, from its insert, whatever became of the twin
	// since; a twin of another scope: while it holds its claim): a
	// throttle. Twins that share a Period so conflict with one
	// inserted less than Period before. An insert that conflicts claims
	// nothing: the window does not move.
	UniquePeriod UniqueScope = "period"
)

// UniqueConflict is what an insert that conflicts with a twin does.
type UniqueConflict string

// The answers to a uniqueness conflict.
const (
	// UniqueReturnExisting inserts nothing and returns the twin, with the
	// status Duplicate. The default.
	UniqueReturnExisting UniqueConflict = "existing"
	// UniqueReplace gives a queued twin the insert's args (and, if the
	// insert is delayed and the twin scheduled, its RunAt: a debounce) and
	// returns it with the status Replaced; the twin keeps its ID, place,
	// priority, attempts, tags and metadata. A twin that is not queued is
	// returned as Duplicate. A queued twin of another Kind or concurrency
	// Key than the insert's is left as it is and the insert Rejected, with
	// the reason NotReplaced gives: the new args under the twin's kind or
	// key would run another kind's handler, or under another key's limit.
	UniqueReplace UniqueConflict = "replace"
	// UniqueReject inserts nothing and reports the insert Rejected.
	UniqueReject UniqueConflict = "reject"
)

// NotReplaced is the Reason of an insert with UniqueReplace refused because
// its queued twin id has another kind or concurrency key (kind and key)
// than the insert's (inKind, inKey).
func NotReplaced(id, kind, key, inKind, inKey string) string {
	return fmt.Sprintf("duplicate of %s, not replaced: it has kind %q and key %q, the insert kind %q and key %q",
		id, kind, key, inKind, inKey)
}

// JobUnique makes a job unique among the jobs of its queue with the same
// Key.
type JobUnique struct {
	// Key identifies twins; at most MaxKeyLen bytes.
	Key   string
	Scope UniqueScope
	// Period is the window of UniquePeriod; ignored by other scopes.
	Period     time.Duration
	OnConflict UniqueConflict
}

// MaxKeyLen is the longest concurrency or unique key.
const MaxKeyLen = 512

// JobInsertStatus is what an insert did with one job.
type JobInsertStatus string

// The statuses of an inserted job.
const (
	// JobInserted: the job is stored; its row's State says where
	// (available, scheduled, parked, or dropped by OnBusyDrop).
	JobInserted JobInsertStatus = "inserted"
	// JobDuplicate: a twin conflicted; the row is the twin's (a twin gone
	// since, whose period claim lives on, is a row of its ID and Queue
	// alone).
	JobDuplicate JobInsertStatus = "duplicate"
	// JobReplaced: a queued twin took the insert's args; the row is the
	// twin's after the change.
	JobReplaced JobInsertStatus = "replaced"
	// JobRejected: nothing was stored (OnBusyFail, or UniqueReject); the row
	// is the twin's for a uniqueness conflict, else nil, and Reason says
	// why.
	JobRejected JobInsertStatus = "rejected"
)

// KeySetLimitParams are the parameters of KeySetLimit.
type KeySetLimitParams struct {
	Queue string
	Key   string
	// Limit is the new override; 0 halts the key. Ignored with Reset.
	Limit int
	// Reset removes the override: each job's own default limit applies.
	Reset bool
}

// KeyParams name one key of a queue.
type KeyParams struct {
	Queue string
	Key   string
}

// KeyListParams are the parameters of KeyList.
type KeyListParams struct {
	Queue string
	// Limit is the page size: 0 means 100, at most 1000.
	Limit  int
	Offset int
}

// KeyListResult is the result of KeyList.
type KeyListResult struct {
	Keys  []*KeyInfo
	Total int // active keys in the queue
}

// KeyInfo is the state of one key of a queue.
type KeyInfo struct {
	Queue string
	Key   string
	// Limit is the override if Override, else the default limit of the
	// key's most recently admitted or parked job (-1 if none is known).
	Limit    int
	Override bool
	// Holding counts the jobs holding a slot: available or running.
	Holding int
	// Running counts the holders that are running.
	Running int
	// Chained counts the jobs chained behind the key's running holders
	// (JobFetchParams.Chain): running, their attempts counted, yet neither
	// holding a slot nor parked, so in neither Holding nor Parked. Each
	// starts on its holder's worker once that holder's handler returns,
	// and takes over its slot when its outcome is recorded. At most one
	// per running holder, so never more than Running. The key's work is
	// Holding + Chained + Parked jobs.
	Chained int
	// Parked counts the jobs waiting for a slot; OldestParked is when the
	// head of the key's parked queue — the next to run — was parked (zero
	// if none). It is the longest wait but after a lowered limit, which
	// puts not-yet-started jobs back at the head with a new ParkedAt.
	Parked       int
	OldestParked time.Time
	// Fence is the highest fencing token among the key's running holders
	// and the jobs chained behind them (0 if none runs): every job of the
	// key leased and not yet finished holds a token no higher.
	Fence int64
	// Holders are the holding jobs (KeyGet only).
	Holders []*KeyHolder
}

// KeyHolder is one job holding a slot of a key.
type KeyHolder struct {
	ID         string
	State      JobState // available or running
	Fence      int64    // running only
	LeaseUntil time.Time
	// Next is the ID of the job chained behind this holder (see
	// KeyInfo.Chained), which takes over its slot when its outcome is
	// recorded; "" if none. Only a running holder has one.
	Next string
}

// MaxKeyLimit is the largest limit of a concurrency key, as a job's default
// or as an override: far above any number of jobs that could run at once,
// so that a bigger one is taken for a mistake, and a number every backend
// keeps exactly (Redis scripts hold numbers as doubles).
const MaxKeyLimit = math.MaxInt32

// CheckKeyLimit returns an error wrapping ErrBadParams unless limit is in
// min..MaxKeyLimit; key names the key in the message.
func CheckKeyLimit(key string, limit, min int) error {
	if limit < min || limit > MaxKeyLimit {
		return fmt.Errorf("%w: concurrency key %q: limit %d, must be %d to %d", ErrBadParams, key, limit, min, MaxKeyLimit)
	}
	return nil
}

// CheckJobInsertKeys validates the concurrency and uniqueness settings of
// one job to insert, for every backend alike: an error wraps ErrBadParams
// and says which setting is wrong.
func CheckJobInsertKeys(j *JobInsert) error {
	if j.Key != "" || j.Limit != 0 || j.OnBusy != "" || j.BusyDelay != 0 {
		if err := CheckKey(j.Key); err != nil {
			return err
		}
		if err := CheckKeyLimit(j.Key, j.Limit, 1); err != nil {
			return err
		}
		switch j.OnBusy {
		case "", OnBusyWait, OnBusyDrop, OnBusyFail:
		case OnBusyReschedule:
			if j.BusyDelay < time.Millisecond {
				return fmt.Errorf("%w: OnBusyReschedule needs a BusyDelay of at least 1ms, not %v", ErrBadParams, j.BusyDelay)
			}
		default:
			return fmt.Errorf("%w: unknown OnBusy policy %q", ErrBadParams, j.OnBusy)
		}
	}
	if u := j.Unique; u != nil {
		if u.Key == "" || len(u.Key) > MaxKeyLen {
			return fmt.Errorf("%w: unique key must have 1 to %d bytes, not %d", ErrBadParams, MaxKeyLen, len(u.Key))
		}
		switch u.Scope {
		case UniqueQueued, UniqueRunning, UniqueUntilDone:
		case UniquePeriod:
			if u.Period < time.Millisecond {
				return fmt.Errorf("%w: UniquePeriod needs a Period of at least 1ms, not %v", ErrBadParams, u.Period)
			}
		default:
			return fmt.Errorf("%w: unknown unique scope %q", ErrBadParams, u.Scope)
		}
		switch u.OnConflict {
		case "", UniqueReturnExisting, UniqueReplace, UniqueReject:
		default:
			return fmt.Errorf("%w: unknown unique conflict answer %q", ErrBadParams, u.OnConflict)
		}
	}
	return nil
}

// CheckKey validates a concurrency key: 1 to MaxKeyLen bytes.
func CheckKey(key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return fmt.Errorf("%w: concurrency key must have 1 to %d bytes, not %d", ErrBadParams, MaxKeyLen, len(key))
	}
	return nil
}
