package baton

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/batonhq/baton/batondriver"
)

// Worker runs the jobs of one kind.
type Worker[T JobArgs] interface {
	// Work runs one attempt. Its return steers the job: nil completes it;
	// JobSnooze(d) runs it again later without counting the attempt;
	// JobCancel(err) ends it with no more attempts; JobAgain() and
	// JobAgainIn(d) complete this run and queue the next one in the same
	// step that frees its concurrency slot; any other error retries it with
	// backoff until its attempts are used up, then it is dead. ctx
	// ends when the job's lease is lost (cause ErrLeaseLost), its timeout
	// passes, or the client stops (ErrStopping).
	Work(ctx context.Context, job *Job[T]) error
}

// WorkFunc adapts a function to a Worker.
type WorkFunc[T JobArgs] func(ctx context.Context, job *Job[T]) error

// Work calls f.
func (f WorkFunc[T]) Work(ctx context.Context, job *Job[T]) error { return f(ctx, job) }

// WorkerOpts are the settings of a kind, from the code that runs it.
type WorkerOpts struct {
	// Queue is where jobs of the kind go when their insert names none.
	// Default "default".
	Queue string
	// MaxAttempts is the kind's default. 0: Config.MaxAttempts.
	MaxAttempts int
	// Timeout bounds one attempt; its context ends when it passes. 0:
	// Config.JobTimeout (1 minute); negative: no timeout.
	Timeout time.Duration
	// Backoff is the delay before retry number attempt (1 after the first
	// failure). nil: Config.Backoff.
	Backoff func(attempt int) time.Duration
	// Concurrency, if set, limits how many jobs of the kind with the same
	// concurrency key run at once (docs/concurrency.md). An insert's own
	// InsertOpts.Concurrency replaces it.
	Concurrency *ConcurrencyOpts
	// Unique, if set, makes jobs of the kind unique among their twins. An
	// insert's own InsertOpts.Unique replaces it.
	Unique *UniqueOpts
	// Middleware wrap every attempt of the kind, the first listed
	// outermost, inside Config.WorkerMiddleware: the client's see what the
	// kind's return. They run within the kind's Timeout, as the handler
	// does. A panic in one, as in one of the client's, is recovered
	// outside every middleware and is the attempt's *PanicError. nil:
	// none.
	Middleware []WorkerMiddleware
}

// Workers registers the worker of each kind. Add workers with AddWorker
// before the client starts; the zero value is not usable, call NewWorkers.
type Workers struct {
	kinds map[string]*kindWorker
}

// NewWorkers returns an empty registry.
func NewWorkers() *Workers { return &Workers{kinds: make(map[string]*kindWorker)} }

// kindWorker is a registered worker without its type parameter.
type kindWorker struct {
	kind string
	opts WorkerOpts
	// run decodes the row's args and calls the worker.
	run func(ctx context.Context, row *JobRow) error
}

// AddWorker registers w for the kind of T with opts (nil for defaults). It
// panics on a kind already registered or empty, as a programming error at
// start-up; AddWorkerSafely returns the error instead.
func AddWorker[T JobArgs](workers *Workers, w Worker[T], opts *WorkerOpts) {
	if err := AddWorkerSafely(workers, w, opts); err != nil {
		panic(err)
	}
}

// AddWorkerSafely is AddWorker returning an error instead of panicking.
func AddWorkerSafely[T JobArgs](workers *Workers, w Worker[T], opts *WorkerOpts) error {
	if workers == nil || workers.kinds == nil {
		return fmt.Errorf("baton: AddWorker: nil or zero Workers; use NewWorkers")
	}
	if w == nil {
		return fmt.Errorf("baton: AddWorker: nil worker")
	}
	var zero T
	kind := zero.Kind()
	if err := checkKind(kind); err != nil {
		return fmt.Errorf("baton: AddWorker: %w", err)
	}
	if _, dup := workers.kinds[kind]; dup {
		return fmt.Errorf("baton: AddWorker: kind %q registered twice", kind)
	}
	o := WorkerOpts{}
	if opts != nil {
		o = *opts
	}
	if o.Queue != "" {
		if err := checkQueue(o.Queue); err != nil {
			return fmt.Errorf("baton: AddWorker %q: %w", kind, err)
		}
	}
	if o.MaxAttempts < 0 {
		return fmt.Errorf("baton: AddWorker %q: negative MaxAttempts %d", kind, o.MaxAttempts)
	}
	if err := checkKeyOpts(o.Concurrency, o.Unique); err != nil {
		return fmt.Errorf("baton: AddWorker %q: WorkerOpts: %w", kind, err)
	}
	if i := slices.IndexFunc(o.Middleware, func(mw WorkerMiddleware) bool { return mw == nil }); i >= 0 {
		return fmt.Errorf("baton: AddWorker %q: WorkerOpts: Middleware[%d] is nil", kind, i)
	}
	o.Middleware = slices.Clone(o.Middleware)
	workers.kinds[kind] = &kindWorker{kind: kind, opts: o, run: func(ctx context.Context, row *JobRow) error {
		job := &Job[T]{JobRow: row}
		if err := json.Unmarshal(row.Args, &job.Args); err != nil {
			return &undecodableError{kind: kind, err: err}
		}
		return w.Work(ctx, job)
	}}
	return nil
}

// checkKeyOpts checks, at registration, what c and u fix for every job of
// a kind; the keys and delays they compute from each job's args are checked
// at its insert.
func checkKeyOpts(c *ConcurrencyOpts, u *UniqueOpts) error {
	ins := &batondriver.JobInsert{}
	if c != nil {
		if c.Limit < 0 || c.Limit > MaxKeyLimit {
			return fmt.Errorf("Concurrency.Limit %d is out of range: 0 (the default, 1) to MaxKeyLimit (%d)", c.Limit, MaxKeyLimit)
		}
		if c.OnBusy == OnBusyReschedule && c.BusyDelay == nil {
			return fmt.Errorf("Concurrency: OnBusyReschedule needs BusyDelay")
		}
		ins.Key, ins.Limit, ins.OnBusy, ins.BusyDelay = "k", max(c.Limit, 1), c.OnBusy, time.Millisecond
	}
	if u != nil {
		ins.Unique = &batondriver.JobUnique{Key: "k", Scope: cmp.Or(u.Scope, UniqueUntilDone), Period: u.Period, OnConflict: u.OnConflict}
	}
	return batondriver.CheckJobInsertKeys(ins)
}

// undecodableError marks args a worker cannot decode: the job is dead at
// once, since no retry can help.
type undecodableError struct {
	kind string
	err  error
}

func (e *undecodableError) Error() string {
	return fmt.Sprintf("baton: args of kind %q cannot be decoded: %v", e.kind, e.err)
}

func checkKind(kind string) error {
	if kind == "" || len(kind) > 128 {
		return fmt.Errorf("job kind %q must have 1 to 128 bytes", kind)
	}
	return nil
}

// CheckQueueName reports whether baton takes q as a queue name: 1 to 128
// bytes of A-Z a-z 0-9 _ . : -, so that it needs no escaping in any
// backend. Its error wraps batondriver.ErrBadParams and says what is
// wrong; every call that takes a queue checks its name so. Tools (the
// dashboard) call it to refuse a name before any backend call.
func CheckQueueName(q string) error { return checkQueue(q) }

func checkQueue(q string) error { return batondriver.CheckQueue(q) }
