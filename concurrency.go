package baton

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/batonhq/baton/batondriver"
)

// ConcurrencyOpts limit how many jobs with the same concurrency key run at
// once in a queue, across every process (docs/concurrency.md). Set them per
// kind in WorkerOpts, or per insert in InsertOpts.
type ConcurrencyOpts struct {
	// Key computes the job's concurrency key from its args, e.g.
	// KeyOf(func(a WebhookArgs) string { return "customer:" + a.Customer }).
	// nil: the kind and the canonical JSON of the whole args, so that only
	// identical jobs share a key (a SHA-256 of it past 200 bytes). A key is
	// 1 to 512 bytes (batondriver.MaxKeyLen); another fails the insert.
	Key func(args JobArgs) string
	// Limit is how many jobs of a key may hold a slot (be available or
	// running) at once while the key has no override stored with
	// Client.SetLimit. Default 1: a mutex per key. At most MaxKeyLimit.
	Limit int
	// OnBusy is what happens to a job whose key is busy when it is first
	// admitted. Default OnBusyWait.
	OnBusy OnBusy
	// BusyDelay computes OnBusyReschedule's delay from the args, once, at
	// the insert. Required for OnBusyReschedule; a delay under 1ms fails the
	// insert.
	BusyDelay func(args JobArgs) time.Duration
}

// OnBusy is what happens to a job whose concurrency key is busy — it holds
// its limit, or other jobs of the key wait — when the job is first
// admitted (its insert, or when its delay ends). A job admitted once is never
// dropped later: its retries, snoozes and follow-ups wait.
type OnBusy = batondriver.OnBusy

// The on-busy policies.
const (
	// OnBusyWait parks the job, invisible to fetchers, until a slot frees;
	// it runs in its turn. The default.
	OnBusyWait = batondriver.OnBusyWait
	// OnBusyDrop ends the job at once in state dropped, with the reason
	// recorded: "drop me if my twin is running".
	OnBusyDrop = batondriver.OnBusyDrop
	// OnBusyReschedule tries the job again after ConcurrencyOpts.BusyDelay,
	// without counting an attempt; a job that finds the key busy again then
	// is rescheduled again, by the same delay, for as long as the key stays
	// busy (or halted): it never waits in line. Use OnBusyWait for a job
	// that must run in its turn.
	OnBusyReschedule = batondriver.OnBusyReschedule
	// OnBusyFail makes the insert fail with ErrKeyBusy; nothing is stored.
	// A delayed job that finds its key busy when due is dropped.
	OnBusyFail = batondriver.OnBusyFail
)

// UniqueOpts make a job unique among its twins in its queue: jobs with the
// same unique key. Set them per kind in WorkerOpts, or per insert in
// InsertOpts.
type UniqueOpts struct {
	// Key computes the unique key from the args. nil: the kind and the
	// canonical JSON of the whole args (a SHA-256 of it past 200 bytes). A
	// key is 1 to 512 bytes (batondriver.MaxKeyLen); another fails the
	// insert.
	Key func(args JobArgs) string
	// Scope is when twins conflict. Default UniqueUntilDone.
	Scope UniqueScope
	// Period is UniquePeriod's window: this insert conflicts with a twin
	// that claimed the key less than Period ago and whose own claim still
	// lasts; an insert that conflicts with none claims the key for Period.
	// At least 1ms for UniquePeriod; ignored by the other scopes.
	Period time.Duration
	// OnConflict is what an insert that conflicts does. Default
	// UniqueReturnExisting.
	OnConflict UniqueConflict
}

// UniqueScope is when two jobs with the same unique key conflict. A job is
// queued while scheduled, parked or available. A job holds its key under
// its own scope, beside the claims of twins of other scopes, so each
// scope's promise holds whatever scopes its twins were inserted with (see
// docs/concurrency.md, "Uniqueness").
type UniqueScope = batondriver.UniqueScope

// The uniqueness scopes.
const (
	UniqueQueued    = batondriver.UniqueQueued    // the twin is queued
	UniqueRunning   = batondriver.UniqueRunning   // the twin is running
	UniqueUntilDone = batondriver.UniqueUntilDone // the twin is queued or running
	UniquePeriod    = batondriver.UniquePeriod    // the twin was inserted less than Period ago
)

// UniqueConflict is what an insert that conflicts with a twin does.
type UniqueConflict = batondriver.UniqueConflict

// The answers to a uniqueness conflict.
const (
	// UniqueReturnExisting inserts nothing and returns the twin, with
	// InsertResult.Status JobDuplicate. The default.
	UniqueReturnExisting = batondriver.UniqueReturnExisting
	// UniqueReplace gives a queued twin the new args (and, if the insert is
	// delayed and the twin scheduled, its run time: a debounce); Status
	// JobReplaced. The twin keeps its ID, place, priority, attempts, tags
	// and metadata. A twin that is not queued is returned as a duplicate. A
	// queued twin of another kind or concurrency key than the new job's
	// (a custom unique key shared by kinds, or a key computed from fields
	// the unique key leaves out) is left alone and the insert fails with
	// ErrDuplicate saying so: its handler or its key's limit would not be
	// the new job's.
	UniqueReplace = batondriver.UniqueReplace
	// UniqueReject makes the insert fail with ErrDuplicate.
	UniqueReject = batondriver.UniqueReject
)

// JobInsertStatus says what an insert did with a job.
type JobInsertStatus = batondriver.JobInsertStatus

// The statuses of an insert.
const (
	JobInserted  = batondriver.JobInserted  // stored: available, scheduled, parked, or dropped by OnBusyDrop
	JobDuplicate = batondriver.JobDuplicate // a twin conflicted; InsertResult.Job is the twin
	JobReplaced  = batondriver.JobReplaced  // a queued twin took the args; InsertResult.Job is the twin
	JobRejected  = batondriver.JobRejected  // nothing stored: ErrKeyBusy or ErrDuplicate
)

// ErrKeyBusy is wrapped by an insert refused by OnBusyFail.
var ErrKeyBusy = errors.New("baton: concurrency key busy")

// ErrDuplicate is wrapped by an insert refused by UniqueReject;
// InsertResult.Job is the twin.
var ErrDuplicate = errors.New("baton: duplicate of a unique job")

// KeyOf adapts a function of a kind's args to ConcurrencyOpts.Key and
// UniqueOpts.Key. It returns "" (an error at insert) for args of another
// type.
func KeyOf[T JobArgs](fn func(args T) string) func(args JobArgs) string {
	return func(args JobArgs) string {
		a, ok := args.(T)
		if !ok {
			return ""
		}
		return fn(a)
	}
}

// defaultKey is the kind and the JSON of the args, hashed if long. Go's
// JSON encoding is canonical for a given type: struct fields in order, map
// keys sorted.
func defaultKey(kind string, encoded []byte) string {
	if len(encoded) <= 200 {
		return kind + ":" + string(encoded)
	}
	sum := sha256.Sum256(encoded)
	return kind + ":sha256:" + hex.EncodeToString(sum[:])
}

// resolveKey is fn's key for args, or without fn the default: the kind and
// the canonical args.
func resolveKey(fn func(JobArgs) string, kind string, args JobArgs, encoded []byte) string {
	if fn == nil {
		return defaultKey(kind, encoded)
	}
	return fn(args)
}

// emptyKeyHint explains the likeliest cause of an empty key from a Key func.
const emptyKeyHint = "returned an empty key (a KeyOf for another args type?)"

// applyConcurrency sets the key settings of job ins from c.
func applyConcurrency(ins *batondriver.JobInsert, c *ConcurrencyOpts, args JobArgs, encoded []byte) error {
	key := resolveKey(c.Key, ins.Kind, args, encoded)
	if key == "" {
		return fmt.Errorf("%w: kind %q: ConcurrencyOpts.Key %s", batondriver.ErrBadParams, ins.Kind, emptyKeyHint)
	}
	ins.Key, ins.Limit, ins.OnBusy = key, c.Limit, c.OnBusy
	if ins.Limit == 0 {
		ins.Limit = 1
	}
	if c.OnBusy == OnBusyReschedule {
		if c.BusyDelay == nil {
			return fmt.Errorf("%w: kind %q: OnBusyReschedule needs ConcurrencyOpts.BusyDelay", batondriver.ErrBadParams, ins.Kind)
		}
		ins.BusyDelay = c.BusyDelay(args)
	}
	return nil
}

// applyUnique sets the uniqueness of job ins from u.
func applyUnique(ins *batondriver.JobInsert, u *UniqueOpts, args JobArgs, encoded []byte) error {
	key := resolveKey(u.Key, ins.Kind, args, encoded)
	if key == "" {
		return fmt.Errorf("%w: kind %q: UniqueOpts.Key %s", batondriver.ErrBadParams, ins.Kind, emptyKeyHint)
	}
	scope := u.Scope
	if scope == "" {
		scope = UniqueUntilDone
	}
	ins.Unique = &batondriver.JobUnique{Key: key, Scope: scope, Period: u.Period, OnConflict: u.OnConflict}
	return nil
}

// KeyInfo is the state of a concurrency key of a queue: its limit, holders,
// the jobs chained behind them (running, without a slot yet) and parked
// jobs. Each available, running or parked job of the key is in exactly one
// of Holding, Chained and Parked.
type KeyInfo = batondriver.KeyInfo

// KeyHolder is a job holding a slot of a key, with the job chained behind
// it, if any.
type KeyHolder = batondriver.KeyHolder

// KeyListOpts page through KeyList; nil means the first 100.
type KeyListOpts struct {
	Limit  int // at most 1000; 0 means 100
	Offset int
}

// ErrKeyNotFound is returned by KeyGet for a key that is not active (no
// holders, parked jobs or override): an idle key keeps no state.
var ErrKeyNotFound = batondriver.ErrKeyNotFound

// KeyList lists a queue's active concurrency keys — those with holders,
// parked jobs or a limit override — most parked first, and how many there
// are. Each comes with its limit, holders, running, chained and parked
// counts, the time its next parked job was parked, and the highest fencing
// token among its running jobs and those chained behind them (0 if none
// runs); not its holders (see KeyGet). It reads an index, not the keyspace.
func (c *Client) KeyList(ctx context.Context, queue string, opts *KeyListOpts) ([]*KeyInfo, int, error) {
	if err := checkQueue(queue); err != nil {
		return nil, 0, fmt.Errorf("baton: KeyList: %w", err)
	}
	p := &batondriver.KeyListParams{Queue: queue}
	if opts != nil {
		p.Limit, p.Offset = opts.Limit, opts.Offset
	}
	res, err := c.driver.KeyList(ctx, p)
	if err != nil {
		return nil, 0, fmt.Errorf("baton: KeyList: %w", err)
	}
	return res.Keys, res.Total, nil
}

// KeyGet returns the state of a concurrency key of a queue with its
// holders (their fences, lease expiry and the job chained behind each), or
// ErrKeyNotFound.
func (c *Client) KeyGet(ctx context.Context, queue, key string) (*KeyInfo, error) {
	if err := checkQueue(queue); err != nil {
		return nil, fmt.Errorf("baton: KeyGet: %w", err)
	}
	info, err := c.driver.KeyGet(ctx, &batondriver.KeyParams{Queue: queue, Key: key})
	if err != nil {
		return nil, fmt.Errorf("baton: KeyGet: %w", err)
	}
	return info, nil
}

// SetLimit stores a limit for a concurrency key of a queue, for every
// process, overriding the kinds' defaults: 0 halts the key. Raising it
// promotes parked jobs at once. Lowering it lets the running jobs finish
// and sends the key's jobs that have not started back to wait, so that no
// more than n run once the running ones end. That includes the jobs
// chained behind running ones (leased in advance, at most one per running
// job: KeyInfo.Chained; see Config.DisableChaining): every client working
// the queue hears of the change and gives back those it has not started.
// One that started before its client heard — its job ahead returned just
// before the change (the backend shows that job running until its outcome
// is recorded), or while the client was reconnecting to the backend —
// runs like the running jobs; every job leased before the change holds a
// fence no higher than the returned KeyInfo.Fence. n must be 0 to MaxKeyLimit. It returns the key's state
// after the change.
func (c *Client) SetLimit(ctx context.Context, queue, key string, n int) (*KeyInfo, error) {
	if err := checkQueue(queue); err != nil {
		return nil, fmt.Errorf("baton: SetLimit: %w", err)
	}
	info, err := c.driver.KeySetLimit(ctx, &batondriver.KeySetLimitParams{Queue: queue, Key: key, Limit: n})
	if err != nil {
		return nil, fmt.Errorf("baton: SetLimit: %w", err)
	}
	return info, nil
}

// ResetLimit removes a key's stored limit: each job's own default limit
// applies again (promoting parked jobs if that is higher).
func (c *Client) ResetLimit(ctx context.Context, queue, key string) (*KeyInfo, error) {
	if err := checkQueue(queue); err != nil {
		return nil, fmt.Errorf("baton: ResetLimit: %w", err)
	}
	info, err := c.driver.KeySetLimit(ctx, &batondriver.KeySetLimitParams{Queue: queue, Key: key, Reset: true})
	if err != nil {
		return nil, fmt.Errorf("baton: ResetLimit: %w", err)
	}
	return info, nil
}
