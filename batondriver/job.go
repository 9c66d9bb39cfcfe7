package batondriver

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// JobDriver is the job half of a backend: the atomic transitions of a job's
// life. docs/job-states.md draws the states; every method below moves jobs
// between them in one atomic step, as seen by every process.
//
// All state of one queue lives together (on Redis, in one hash slot), so
// every transition names exactly one queue. Batched methods take many jobs
// of that queue at once: throughput comes from amortising round trips and
// script entries, not from doing less.
//
// A queue's name is one that CheckQueue takes; every method that names a
// queue refuses any other with an error wrapping ErrBadParams.
//
// The registry of the processes that work the queues (ProcessDriver) is
// the one part that belongs to no queue.
type JobDriver interface {
	KeyDriver
	ProcessDriver

	// JobInsert adds jobs to one queue, in order. A job with a future RunAt
	// is scheduled; otherwise it is admitted: available at once (and one
	// idle fetcher of the queue is woken) unless its concurrency key is busy
	// and its OnBusy policy parks, drops, reschedules or refuses it. A job
	// with Unique may instead resolve to a twin (see JobInsertStatus).
	JobInsert(ctx context.Context, p *JobInsertParams) (*JobInsertResult, error)

	// JobFetch first admits due scheduled jobs and takes back the jobs
	// whose leases expired (their attempt counted: retried or dead, or
	// cancelled if a cancel was requested; their key slots freed and
	// parked jobs promoted), each in bounded number,
	// then leases up to Max available jobs to the caller in order
	// (priority, then arrival), unless the queue is paused. A keyed job's
	// lease carries the key's next fencing token. A backend that may run a
	// call after its caller gave up on it (a stalled server) leases nothing
	// in a call run after ctx's deadline, as best it can tell. A backend
	// over a network gives back, as never leased, what a call that returned
	// an error leased (its reply was lost): with the same instance's first
	// fetch or finish of the queue after that call ran.
	JobFetch(ctx context.Context, p *JobFetchParams) (*JobFetchResult, error)

	// JobWait blocks until a job may be available in the queue (an insert
	// woke it), Timeout passes, or ctx ends. It wakes one waiter per job
	// made available, not all of them: each call that makes jobs available
	// leaves one wake token per job it leaves available, none for a job it
	// leases itself (a fetch, or a finish with Fetch, may lease jobs it
	// admitted or promoted). A call that makes the queue's earliest
	// scheduled run time earlier than it was as the call began, or
	// schedules the first — an insert, an outcome, a fetch that takes back
	// an expired lease and retries it after RecoverDelay, a debounce that
	// moves a job — leaves one token more, so that a waiter learns the new
	// NextRunAt; a job due at the earliest's very run time, as the backend
	// stores it, leaves none: the fetchers that learnt that time wake then.
	// It is a hint: the caller fetches and may find nothing.
	JobWait(ctx context.Context, p *JobWaitParams) error

	// JobExtend renews the leases of running jobs. It reports the jobs whose
	// leases were no longer held (expired and taken back, or finished by
	// another owner): their handlers must stop.
	JobExtend(ctx context.Context, p *JobExtendParams) (*JobExtendResult, error)

	// JobFinish records the outcome of leased jobs: completed, retry at a
	// time, snoozed (retry without counting the attempt), cancelled, dead,
	// or again (a new run); any of them but completed ends cancelled a job
	// whose cancel was requested (JobCancel). A keyed job's slot is freed
	// and parked jobs of its key promoted in the same step. An outcome
	// whose lease is no longer held is ignored and reported stale: a late
	// owner never overwrites a newer state. Its Fetch and Chain lease
	// nothing in a call run after ctx's deadline, and what a call that
	// returned an error leased is given back, as for JobFetch; the
	// outcomes are recorded. A finish with no outcomes records nothing,
	// leases as a fetch if Fetch is set, and gives back what the
	// instance's lost calls to the queue leased (a client's Stop makes one
	// per queue for that).
	JobFinish(ctx context.Context, p *JobFinishParams) (*JobFinishResult, error)

	// JobGet returns one job, or ErrJobNotFound.
	JobGet(ctx context.Context, p *JobGetParams) (*JobRow, error)

	// JobList lists a queue's jobs in one state, a page at a time: oldest
	// first, but available jobs in the order they will be fetched
	// (priority, then the order they became available). With a Key, the
	// parked jobs of that concurrency key in the order they will be
	// promoted.
	JobList(ctx context.Context, p *JobListParams) (*JobListResult, error)

	// JobRetry admits a dead, cancelled, dropped or scheduled job now with
	// its attempts reset (a keyed job may be parked). Running, parked and
	// completed jobs cannot be retried; an available one keeps its place,
	// with its attempts reset.
	JobRetry(ctx context.Context, p *JobGetParams) (*JobRow, error)

	// JobDelete removes a job that is not running, freeing its key slot or
	// its place in its key's parked queue.
	JobDelete(ctx context.Context, p *JobGetParams) error

	// QueueListen registers interest in a queue's notices, which the
	// transitions below publish in the same atomic step as their change,
	// to every listener of the queue:
	//
	//   - A recall: a KeySetLimit that leaves a key with more holders than
	//     its limit — lowered, or halted — while jobs are chained behind
	//     them (JobFetchParams.Chain) sends the key and the highest fence
	//     among its running and chained jobs. A job of the key chained with
	//     a fence no higher was chained before the change, and would take
	//     over a slot the key no longer has: its client should not start it
	//     but give it back (JobFinish.GiveBack), which puts it at the head
	//     of the key's parked jobs. A change that leaves the holders within
	//     the limit recalls nothing.
	//   - A cancel: a JobCancel of a running job (chained ones included)
	//     sends its ID, so that its worker stops it without waiting for its
	//     next JobExtend, which reports the request all the same.
	//
	// The backend changes nothing itself: a chained job whose client
	// started it before the recall came runs. When QueueListen returns,
	// delivery is established: every later notice of the queue reaches the
	// listener, or a Recheck notice does.
	QueueListen(ctx context.Context, p *QueueParams) (QueueListener, error)

	// JobCancel cancels a job for an admin. A scheduled, parked or
	// available job ends cancelled at once, Reason recorded as its error,
	// freeing its key slot or its place among its key's parked jobs and
	// promoting in the same step, and releasing its unique claim as a
	// cancelled job does. A running job gets a cancel request, stored with
	// it (CancelRequestedAt; a second request keeps the first): JobExtend
	// reports it to the lease's holder (CancelRequested), which should
	// stop the handler, and every outcome recorded for the job but
	// completed ends it cancelled instead — a failure, a snooze, an again,
	// a dead, a give-back (JobFinish.GiveBack) — its error Reason followed
	// by the outcome's own ("reason: error"); a completed outcome stands
	// (the handler finished before it noticed). A job chained behind it
	// takes over its slot as after any outcome, or goes back to its key's
	// parked jobs with the give-back's unchaining, and is not lost. A
	// request is never lost with the lease either: a job taken back (its
	// lease expired, or a call whose reply was lost gave it back) ends
	// cancelled rather than running again, as does a chained job put back
	// unrun. Completed, cancelled, dead and dropped jobs cannot be
	// cancelled: an error wrapping ErrBadParams names the state. The
	// result is the job after the call: cancelled, or running with
	// CancelRequestedAt set.
	JobCancel(ctx context.Context, p *JobCancelParams) (*JobRow, error)

	// QueueStats counts a queue's jobs by state.
	QueueStats(ctx context.Context, p *QueueParams) (*QueueStatsResult, error)

	// QueueList names the queues that ever had a job.
	QueueList(ctx context.Context) ([]string, error)

	// QueuePause stops (or, with Resume, restarts) fetching from a queue for
	// every process. Inserts continue; running jobs finish. Resuming a
	// paused queue wakes one waiting fetcher per available job (JobWait;
	// a backend may cap how many one call wakes).
	QueuePause(ctx context.Context, p *QueuePauseParams) error

	// QueueScheduleRegister records a recurring schedule in a queue, or
	// refreshes its record: Spec and Kind are replaced (but an empty Kind
	// keeps the one recorded), SeenAt becomes now and ExpiresAt now + TTL;
	// RegisteredAt is kept. Expired records of the queue are dropped in
	// the same step. It does not make the queue listed by QueueList.
	QueueScheduleRegister(ctx context.Context, p *QueueScheduleParams) error

	// QueueScheduleList lists a queue's registered schedules, by name, each
	// with the last tick inserted under its name; expired records are
	// dropped first. A queue with none gives an empty list.
	QueueScheduleList(ctx context.Context, p *QueueParams) (*QueueScheduleListResult, error)
}

// QueueListener delivers the notices of one queue (JobDriver.QueueListen).
type QueueListener interface {
	// C delivers notices. It is never closed; stop receiving after Close.
	C() <-chan QueueNotice
	// Close stops delivery and releases the listener's resources. It is
	// safe to call more than once.
	Close()
}

// QueueNotice is one notice of a queue (JobDriver.QueueListen): a recall of
// the jobs of Key chained with a fence no higher than Fence; a cancel of
// the running job Cancel names; or, with Recheck set, word that notices
// may have been lost (for example over a reconnect): every job chained so
// far should be treated as recalled, and cancels come with the next
// JobExtend.
type QueueNotice struct {
	Recheck bool
	Key     string
	Fence   int64
	Cancel  string // a job ID
}

// JobState is where a job is in its life.
type JobState string

// The states of a job. Completed, Cancelled and Dead are terminal.
const (
	JobStateScheduled JobState = "scheduled" // waits for RunAt (a delay, a retry's backoff, a snooze)
	JobStateParked    JobState = "parked"    // waits for a slot of its concurrency key; invisible to fetchers
	JobStateAvailable JobState = "available" // may be fetched (holds its key's slot)
	JobStateRunning   JobState = "running"   // leased to a worker (holds its key's slot)
	JobStateCompleted JobState = "completed" // succeeded; kept for the retention period
	JobStateCancelled JobState = "cancelled" // the handler asked for no more attempts; in the dead set
	JobStateDead      JobState = "dead"      // attempts used up, or not runnable; in the dead set
	JobStateDropped   JobState = "dropped"   // its key was busy and its OnBusy policy dropped it; kept for the retention period
)

// JobStates are every state, in the order of a job's life.
var JobStates = []JobState{JobStateScheduled, JobStateParked, JobStateAvailable, JobStateRunning,
	JobStateCompleted, JobStateCancelled, JobStateDead, JobStateDropped}

// JobRow is a job as the backend stores it.
type JobRow struct {
	ID          string
	Queue       string
	Kind        string
	Args        []byte // as encoded by the client (JSON)
	Priority    int    // 0 is the most urgent; at most MaxPriority
	State       JobState
	Attempt     int // attempts started so far
	MaxAttempts int
	Tags        []string
	Metadata    []byte // JSON object or nil

	// Key is the concurrency key ("" for none), Limit its default limit
	// and OnBusy its policy for the job's first admission (0 and "" for
	// a job without a key).
	Key    string
	Limit  int
	OnBusy OnBusy
	// Fence is the key's fencing token of the current (or last) lease; 0
	// for a job without a key or never leased.
	Fence int64
	// Unique is the unique key ("" for none) and UniqueScope its scope.
	Unique      string
	UniqueScope UniqueScope
	// Runs counts the runs started by JobOutcomeAgain; 0 for the first.
	Runs int

	CreatedAt time.Time
	RunAt     time.Time // when it becomes (or became) available
	// AttemptedAt is when the latest attempt started (was leased); zero
	// before the first. A chained job put back without running, its
	// attempt not counted (see JobFetchParams.Chain), gets back the
	// AttemptedAt of its last counted attempt, zero if none. A job snoozed
	// or given back (JobFinish.GiveBack) keeps it, though Attempt no
	// longer counts that attempt: its handler may have run.
	AttemptedAt time.Time
	FinishedAt  time.Time // when it reached a terminal state
	ParkedAt    time.Time // when it was last parked; zero if never

	// Errors are the failed attempts' errors, oldest first (at most the last
	// MaxErrors). A dropped job's reason is recorded here too (attempt 0).
	Errors []AttemptError

	// Lease is the current attempt's secret while running: outcomes and
	// extensions must present it.
	Lease string
	// LeaseUntil is when the backend takes a running job back. A chained
	// job (After set) is taken back with the job ahead of it, whose lease
	// this is, never on its own.
	LeaseUntil time.Time
	// After is, for a chained job (see JobFetchParams.Chain), the ID of
	// the job ahead of it: leased to the same caller, which starts this
	// one on the same worker once that job's handler has returned. It is
	// "" for every other job, and for a chained job once the outcome of
	// the job ahead is recorded.
	After string
	// CancelRequestedAt is when JobCancel asked a running job to stop;
	// zero if never. A job that completed before its handler noticed
	// keeps it; one that ended cancelled does not (it is ended, and a
	// retry runs it anew).
	CancelRequestedAt time.Time

	// Output is what the latest run that completed recorded
	// (JobFinish.Output: JSON, at most MaxOutputLen bytes), nil if none
	// did. JobGet and JobList fill it in; the rows other calls return
	// leave it nil.
	Output []byte
}

// AttemptError is the error of one failed attempt.
type AttemptError struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
}

// Limits the backends enforce.
const (
	MaxPriority = 9
	MaxErrors   = 10
	// MaxOutputLen is the most bytes of output one job keeps
	// (JobFinish.Output).
	MaxOutputLen = 64 << 10
)

// JobInsertParams are the parameters of JobInsert.
type JobInsertParams struct {
	Queue string
	Jobs  []*JobInsert
	// Once, if set, makes the insert happen at most once per tick of a
	// recurring schedule, across every process: the queue remembers the
	// last tick inserted under Once.Name, and an insert for a tick not after
	// it inserts nothing and reports Skipped.
	Once *JobInsertOnce
}

// JobInsertOnce names the tick of a recurring schedule an insert is for.
type JobInsertOnce struct {
	Name string
	Tick time.Time
}

// JobInsert is one job to insert. The driver assigns ID and CreatedAt.
type JobInsert struct {
	Kind        string
	Args        []byte
	Priority    int
	MaxAttempts int
	RunAt       time.Time // zero or past: available now
	// Delay, if positive, makes the job due Delay after the backend's
	// clock reads at the insert, measured on that clock rather than the
	// caller's, to its resolution (Redis reads whole milliseconds: by a
	// finer clock the job may be due up to 1ms sooner); RunAt must then be
	// zero.
	Delay    time.Duration
	Tags     []string
	Metadata []byte

	// Key, if not empty, is the job's concurrency key (at most MaxKeyLen
	// bytes): at most its limit of the queue's jobs with this key hold a
	// slot at once (see KeyDriver).
	Key string
	// Limit is the key's default limit, used while the key has no
	// override; at least 1 when Key is set.
	Limit int
	// OnBusy is the policy when the key is busy at the job's first
	// admission; "" means OnBusyWait.
	OnBusy OnBusy
	// BusyDelay is OnBusyReschedule's delay; at least 1ms for it.
	BusyDelay time.Duration
	// Unique, if set, makes the job unique among its twins.
	Unique *JobUnique
}

// JobInsertResult is the result of JobInsert, in the order of the params.
type JobInsertResult struct {
	// Jobs are the inserted jobs, or the twins they resolved to; nil for a
	// job rejected by OnBusyFail.
	Jobs []*JobRow
	// Status says what became of each job, and Reason why, for Rejected
	// (else "").
	Status []JobInsertStatus
	Reason []string
	// Skipped reports that Once's tick had been inserted already, or a
	// later tick of its schedule had; Jobs is empty then.
	Skipped bool
	// LastTick is, with Skipped, the last tick the queue remembers
	// inserted under Once.Name: Once.Tick if that tick was inserted (by
	// another caller), a later tick if one was inserted before this
	// call came (this tick was then inserted before it, or never will
	// be: the caller came late).
	LastTick time.Time
}

// JobFetchParams are the parameters of JobFetch.
type JobFetchParams struct {
	Queue string
	// Max is the most jobs to lease. 0 leases none: the call does only its
	// upkeep (due jobs admitted, expired leases taken back, sweeps), which
	// a process whose workers are all busy still needs, since the leases
	// of JobFinish's Fetch do none.
	Max int
	// LeaseTTL is how long the fetched jobs' leases last unless extended.
	LeaseTTL time.Duration
	// RecoverDelay is how long after its lease expired (its worker died or
	// lost the backend) a job runs again, if it has attempts left. 0: at
	// once.
	RecoverDelay time.Duration
	// DeadRetention is how long jobs stay in the dead set (dead and
	// cancelled) before a fetch sweeps them. 0: kept until retried or
	// deleted.
	DeadRetention time.Duration
	// DroppedRetention is how long dropped jobs are kept before a fetch
	// sweeps them. 0: kept until deleted.
	DroppedRetention time.Duration
	// Chain asks for chained leases, so that a key's next job starts
	// without a round trip: if the call leaves the queue with no job
	// available (and the queue is not paused), then behind each keyed job
	// it leases whose key has parked jobs, the key's next parked job is
	// leased too, to the same caller, with After set, until a chain leaves
	// a job available (with mixed defaults a chain may promote the key's
	// next parked job: see KeyDriver), which ends them. The caller must
	// run a chained job on the worker of the job ahead, once that job's
	// handler has returned, and not before.
	//
	// A chained job is running (its attempt counted, a fencing token
	// given: above that of the job ahead's lease, and so below that of
	// any later lease of the job ahead) but holds no slot of its key. When the outcome of the job
	// ahead is recorded, whatever it is, the chained job takes over that
	// job's slot and lease_until, even if the key's limit was lowered
	// meanwhile: like any leased job, it runs. If instead the lease of the
	// job ahead expires, the chained job goes back to the head of its
	// key's parked jobs, its attempt not counted (and its AttemptedAt
	// what it was before), before the freed slot
	// promotes them. Extending a chained job's lease extends the job
	// ahead's too. Its own outcome, should it come first, is recorded as
	// any other; it then frees no slot.
	Chain bool
}

// JobFetchResult is the result of JobFetch.
type JobFetchResult struct {
	Jobs []*JobRow
	// NextRunAt is when the queue's earliest scheduled job becomes due, or
	// zero if none is scheduled; fetchers sleep no longer than that. It is
	// a time of the backend's clock, which a fetcher measures from Now,
	// never reads on its own: the two clocks may differ, and a server's
	// may jump.
	NextRunAt time.Time
	// Now is the backend's clock when the fetch ran. Zero from a backend
	// that does not report it: a fetcher then takes NextRunAt as a time of
	// its own clock.
	Now time.Time
	// Paused reports that the queue is paused.
	Paused bool
	// Recovered counts jobs whose leases had expired and were taken back.
	Recovered int
	// More reports that the fetch took Max jobs and more are available:
	// a caller with free workers fetches again only then.
	More bool
}

// JobWaitParams are the parameters of JobWait.
type JobWaitParams struct {
	Queue   string
	Timeout time.Duration
}

// JobLease names one leased job.
type JobLease struct {
	ID    string
	Lease string
}

// JobExtendParams are the parameters of JobExtend.
type JobExtendParams struct {
	Queue  string
	Leases []JobLease
	TTL    time.Duration
}

// JobExtendResult is the result of JobExtend.
type JobExtendResult struct {
	// Lost are the IDs whose leases were no longer held.
	Lost []string
	// CancelRequested are the IDs, among those whose leases were renewed,
	// of the jobs an admin asked to cancel (JobCancel): their handlers
	// should stop. Reported at every renewal until the outcome is
	// recorded.
	CancelRequested []string
	// Now is the backend's time of the extension.
	Now time.Time
}

// JobOutcome is what became of an attempt.
type JobOutcome string

// The outcomes of an attempt.
const (
	JobOutcomeCompleted JobOutcome = "completed"
	JobOutcomeRetry     JobOutcome = "retry"  // failed; runs again at RunAt
	JobOutcomeSnooze    JobOutcome = "snooze" // runs again at RunAt; the attempt is not counted
	JobOutcomeCancel    JobOutcome = "cancel" // no more attempts
	JobOutcomeDead      JobOutcome = "dead"   // failed for good
	// JobOutcomeAgain ends the run successfully and queues a new run of the
	// same job at RunAt, with its attempts reset and Runs+1. Its key slot
	// is freed and the new run admitted in the same step — behind the key's
	// parked jobs, if any — so no twin slips in between and the follow-up
	// cannot be lost; the job keeps its unique key throughout.
	JobOutcomeAgain JobOutcome = "again"
)

// JobFinishParams are the parameters of JobFinish.
type JobFinishParams struct {
	Queue    string
	Finished []*JobFinish
	// Retention is how long completed jobs are kept; 0 deletes them at once.
	Retention time.Duration
	// Fetch, if set, leases up to Fetch.Max available jobs of the queue to
	// the caller in the same step, after the outcomes are recorded and the
	// freed key slots' parked jobs promoted, as JobFetch leases them
	// (nothing from a paused queue): a worker pool hands the workers that
	// just freed up straight to the next jobs, without a fetch round trip.
	// It does none of JobFetch's upkeep (due jobs, expired leases, sweeps).
	Fetch *JobFinishFetch
	// Chain asks for chained leases as JobFetchParams.Chain does, behind
	// the jobs Fetch leases and behind the chained jobs that take over
	// the slots of the jobs finished here (their After is then cleared).
	// A chained job takes over its slot whether or not Chain is set.
	Chain bool
}

// JobFinishFetch asks JobFinish to lease jobs too.
type JobFinishFetch struct {
	Max      int
	LeaseTTL time.Duration
}

// JobFinish is the outcome of one leased attempt.
type JobFinish struct {
	JobLease
	Outcome JobOutcome
	// Error is recorded for every outcome but Completed and Snooze.
	Error string
	// RunAt is when a Retry, Snooze or Again runs again.
	RunAt time.Time
	// Delay, if positive, is instead how long after the backend's clock
	// reads as it records the outcome the job runs again; RunAt must then
	// be zero.
	Delay time.Duration
	// Unchain puts the job chained behind this one, which the caller will
	// not run (it is stopping), back at the head of its key's parked jobs,
	// its attempt not counted, instead of handing it this job's slot: the
	// freed slot then promotes it first, as when this job's lease expires.
	Unchain bool
	// GiveBack, with a Snooze and a zero RunAt (now), returns a job
	// the caller will not run to its end (it is stopping) to its place, as
	// if it had not been leased: its attempt not counted, its unique claim
	// as while queued, a job chained behind it back at the head of its
	// key's parked jobs, and the job itself available, holding its key's
	// slot, unless the key's limit was lowered below its holders since it
	// was leased (an override set lower or removed; holders admitted
	// beside it under larger defaults of their own lower nothing): then it
	// waits at the head of the parked jobs, before the chained one. So a
	// stop and a restart keep each key's order. A plain Snooze admits the
	// job again behind its key's parked jobs.
	GiveBack bool
	// Output, if not empty, is stored with the job (JobRow.Output) by a
	// Completed or an Again outcome, in place of any output an earlier
	// run stored; JSON of at most MaxOutputLen bytes. Other outcomes
	// take none.
	Output []byte
}

// CheckFinish reports an ErrBadParams error for an outcome that
// CheckGiveBack refuses, or whose Output is over MaxOutputLen bytes or
// set on an outcome that takes none. Drivers call it.
func CheckFinish(f *JobFinish) error {
	if err := CheckGiveBack(f); err != nil {
		return err
	}
	if len(f.Output) == 0 {
		return nil
	}
	if f.Outcome != JobOutcomeCompleted && f.Outcome != JobOutcomeAgain {
		return fmt.Errorf("%w: Output is stored by a %s or an %s outcome, not a %s", ErrBadParams, JobOutcomeCompleted, JobOutcomeAgain, f.Outcome)
	}
	if len(f.Output) > MaxOutputLen {
		return fmt.Errorf("%w: Output of %d bytes, over MaxOutputLen (%d)", ErrBadParams, len(f.Output), MaxOutputLen)
	}
	return nil
}

// CheckGiveBack reports an ErrBadParams error for an outcome that sets
// GiveBack but is not a Snooze with a zero RunAt and Delay, or whose RunAt
// and Delay are not valid together (CheckDue). Drivers call it.
func CheckGiveBack(f *JobFinish) error {
	if err := CheckDue(f.RunAt, f.Delay); err != nil {
		return err
	}
	if f.GiveBack && (f.Outcome != JobOutcomeSnooze || !f.RunAt.IsZero() || f.Delay != 0) {
		return fmt.Errorf("%w: GiveBack takes a Snooze due now, not %s at %v or in %v", ErrBadParams, f.Outcome, f.RunAt, f.Delay)
	}
	return nil
}

// CheckDue reports an ErrBadParams error for a negative delay, or one set
// with a RunAt. Drivers call it for inserts and outcomes.
func CheckDue(runAt time.Time, delay time.Duration) error {
	switch {
	case delay < 0:
		return fmt.Errorf("%w: negative Delay %v", ErrBadParams, delay)
	case delay > 0 && !runAt.IsZero():
		return fmt.Errorf("%w: both a RunAt (%v) and a Delay (%v)", ErrBadParams, runAt, delay)
	}
	return nil
}

// JobFinishResult is the result of JobFinish.
type JobFinishResult struct {
	// Stale are the IDs whose leases were no longer held; their outcomes
	// were not recorded.
	Stale []string
	// Jobs are the jobs leased by Fetch, in fetch order.
	Jobs []*JobRow
}

// JobGetParams name one job.
type JobGetParams struct {
	Queue string
	ID    string
}

// JobCancelParams are the parameters of JobCancel.
type JobCancelParams struct {
	Queue string
	ID    string
	// Reason is recorded as the cancelled job's error (a running job's
	// outcome error follows it); not empty.
	Reason string
}

// CheckJobCancel checks what every backend requires of p: a queue name
// CheckQueue takes, an ID and a Reason. The error wraps ErrBadParams.
func CheckJobCancel(p *JobCancelParams) error {
	if err := CheckQueue(p.Queue); err != nil {
		return err
	}
	switch {
	case p.ID == "":
		return fmt.Errorf("%w: empty job ID", ErrBadParams)
	case p.Reason == "":
		return fmt.Errorf("%w: job %q: empty cancel Reason", ErrBadParams, p.ID)
	}
	return nil
}

// NotCancellable is the error of a backend asked to cancel job id, which
// has ended in state: it wraps ErrBadParams.
func NotCancellable(id string, state JobState) error {
	return fmt.Errorf("%w: job %q is %s: only scheduled, parked, available and running jobs can be cancelled",
		ErrBadParams, id, state)
}

// CancelledError is the error a backend records for a job that a cancel
// request ends, with reason the request's and msg the error of what ended
// it (an outcome's, "lease expired"; "" for none): "reason: msg", or
// reason alone.
func CancelledError(reason, msg string) string {
	if msg == "" {
		return reason
	}
	return reason + ": " + msg
}

// JobListParams are the parameters of JobList.
type JobListParams struct {
	Queue string
	State JobState
	// Limit is the page size; at most 1000.
	Limit int
	// Offset skips that many jobs.
	Offset int
	// Key, if set, lists the jobs parked for that concurrency key alone,
	// in the order they will be promoted: the head, the next to run as
	// a slot frees, first (after a lowered limit, the holders it moved
	// back are at the head, though parked last). State must be parked
	// (KeyGet lists a key's holders). Total counts the key's parked jobs.
	Key string
}

// CheckJobList checks what every backend requires of p: a queue name
// CheckQueue takes, a known state, a page PageSize takes, and a Key only
// with State parked, of 1 to MaxKeyLen bytes. The error wraps
// ErrBadParams.
func CheckJobList(p *JobListParams) error {
	if err := CheckQueue(p.Queue); err != nil {
		return err
	}
	if !slices.Contains(JobStates, p.State) {
		return fmt.Errorf("%w: unknown job state %q", ErrBadParams, p.State)
	}
	if _, err := PageSize(p.Limit, p.Offset); err != nil {
		return err
	}
	if p.Key == "" {
		return nil
	}
	if p.State != JobStateParked {
		return fmt.Errorf("%w: jobs of concurrency key %q are listed in state %s only, not %s (KeyGet lists its holders)",
			ErrBadParams, p.Key, JobStateParked, p.State)
	}
	return CheckKey(p.Key)
}

// JobListResult is the result of JobList.
type JobListResult struct {
	Jobs  []*JobRow
	Total int
}

// QueueParams name a queue.
type QueueParams struct {
	Queue string
}

// MaxQueueLen is the longest queue name, in bytes.
const MaxQueueLen = 128

// CheckQueue reports whether every backend takes name as a queue name: 1
// to MaxQueueLen bytes of A-Z a-z 0-9 _ . : -, so that it needs no
// escaping in any backend (a Redis key, a hash tag) and reads as itself.
// Its error wraps ErrBadParams, names the queue and says what is wrong.
// Drivers call it in every call that takes a queue.
func CheckQueue(name string) error {
	if name == "" || len(name) > MaxQueueLen {
		return fmt.Errorf("%w: queue name %q must have 1 to %d bytes", ErrBadParams, name, MaxQueueLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-') {
			return fmt.Errorf("%w: queue name %q: byte %q not allowed (use A-Z a-z 0-9 _ . : -)", ErrBadParams, name, c)
		}
	}
	return nil
}

// QueueStatsResult counts a queue's jobs by state.
type QueueStatsResult struct {
	Queue  string
	Paused bool
	Counts map[JobState]int
	// Keys counts the active concurrency keys (see KeyList).
	Keys int
	// Dropped counts the jobs ever dropped by OnBusyDrop (or a busy
	// OnBusyFail when due), including those swept since.
	Dropped int64
	// OldestAvailable is the earliest RunAt among the available jobs at the
	// front of the queue, the first of each priority; zero if none is
	// available. It is the longest wait unless a job became available well
	// after its RunAt (a scheduled job admitted late, a promoted parked
	// job) and so queues behind younger jobs of its priority.
	OldestAvailable time.Time
}

// QueuePauseParams are the parameters of QueuePause.
type QueuePauseParams struct {
	Queue  string
	Resume bool
}
