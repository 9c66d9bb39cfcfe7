package batontest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/internal/testbridge"
)

// WorkOpts are the options of Work; nil means the defaults.
type WorkOpts struct {
	// Config is the configuration of the client the job runs under, as in
	// production: its WorkerMiddleware wrap the attempt, outermost first,
	// outside the kind's own, and its InsertMiddleware the job's insert; its JobTimeout,
	// MaxAttempts and Backoff are the defaults of a kind that sets none;
	// its OnJobEnd hears of the attempt; its CompletedRetention, if
	// negative, deletes a completed job at once. If its Workers register
	// T's kind, the kind's settings there are the job's, and its worker
	// runs when Work is given none. Its Logger gets the worker's logs
	// (nil: they are discarded, not sent to slog.Default). Queues,
	// Concurrency, PeriodicJobs and the other settings of a running pool
	// play no part. nil: the defaults.
	Config *baton.Config
	// Worker are the kind's settings, as given to baton.AddWorker: the
	// job's queue, MaxAttempts, Timeout, Backoff, Concurrency and Unique
	// follow them, and their Middleware wrap the attempt. They replace the settings Config.Workers registers for
	// the kind. nil: those, else the defaults.
	Worker *baton.WorkerOpts
	// Insert are the job's options, as given to Client.Insert; Delay and
	// RunAt are ignored, since Work runs the job at once. nil: the
	// defaults.
	Insert *baton.InsertOpts
	// Attempt is the attempt the handler sees. Default 0 means 1; a later
	// one N has the N-1 attempts before it failed, and recorded in
	// Job.Errors, as a worker's retries would leave them. It must not
	// exceed the job's MaxAttempts.
	Attempt int
}

// WorkResult is the attempt Work ran, and what became of it.
type WorkResult[T baton.JobArgs] struct {
	// Job is the job as the handler received it: leased, running, its
	// args decoded (or as far as they decode, if the handler did not run).
	Job *baton.Job[T]
	// Err is what the attempt returned, the error a worker reads the
	// outcome from: the handler's, as the middleware passed it on, or a
	// *baton.PanicError if either panicked (the job records its text and
	// stack).
	Err error
	// Outcome is what a worker records for the attempt, as
	// Config.OnJobEnd hears it: JobOutcomeCompleted for a nil Err;
	// JobOutcomeSnooze, JobOutcomeAgain or JobOutcomeCancel as the
	// handler asked (baton.OutcomeOf); JobOutcomeDead for args that do not
	// decode into T; else JobOutcomeRetry, which the backend turns into a
	// dead job if its attempts are used up (see Recorded). A cause given
	// to ctx changes it as it does a worker's (see Work); JobOutcomeLost
	// means nothing was recorded.
	Outcome baton.JobOutcome
	// Delay is how long after the attempt the job runs again: the kind's
	// Backoff for a retry (WorkerOpts.Backoff, else Config.Backoff, else
	// baton.DefaultBackoff, which is jittered), the delay asked for by a
	// snooze or a JobAgainIn; 0 for every other outcome.
	Delay time.Duration
	// Recorded is the job as the backend holds it once the outcome is
	// recorded: its State (completed; scheduled for a retry or a later
	// run, or available at once; dead once its attempts are used up;
	// cancelled), its RunAt, Errors and Runs. nil only if the backend
	// keeps it no more (Config.CompletedRetention negative).
	Recorded *baton.JobRow
}

// Work runs worker's handler once for a job of args as a client's worker
// runs it, in the calling goroutine, and returns what became of the
// attempt. worker nil runs the worker opts.Config.Workers registers for
// T's kind.
//
// The job is inserted, with opts, into a private in-memory backend of
// Work's own, leased from it, run, and its outcome recorded there, as a
// worker does each step, so the handler sees a real job: an ID, its
// queue, Attempt 1 (or opts.Attempt), its concurrency key and that key's
// fencing token, MaxAttempts, tags, and args that went through JSON as
// stored args do (a field JSON drops is lost here as in production). The
// attempt runs as a worker's does: through Config.WorkerMiddleware and the
// kind's WorkerOpts.Middleware, its context ended after the kind's Timeout (WorkerOpts.Timeout, else
// Config.JobTimeout, 1 minute by default; negative: never) or with ctx,
// and a panic in the handler or a middleware recovered as its error.
//
// ctx is the parent of the handler's context. Cancelled with one of the
// causes a worker's context is given, it stands for that event, and the
// outcome is what a worker makes of it: baton.ErrJobCancelled, an admin's
// cancel (an error returned ends the job cancelled, nil completes it);
// baton.ErrStopping, the client's Stop (the job is given back, its attempt
// not counted: JobOutcomeSnooze, available at once); baton.ErrLeaseLost,
// a lost lease (nothing is recorded: JobOutcomeLost).
//
// The job's lease lasts an hour and is not renewed. The backend is Work's
// own: no other job holds the job's concurrency key, or is its unique
// twin. Work fails the test with tb.Fatalf if args or opts are invalid, as NewClient,
// AddWorker or Client.Insert would refuse them, or if worker is nil and
// Config.Workers registers no worker for T's kind.
func Work[T baton.JobArgs](ctx context.Context, tb testing.TB, worker baton.Worker[T], args T, opts *WorkOpts) *WorkResult[T] {
	tb.Helper()
	o := WorkOpts{}
	if opts != nil {
		o = *opts
	}
	cfg := baton.Config{}
	if o.Config != nil {
		cfg = *o.Config
	}
	kind := args.Kind()
	settings, registered, ok := kindOf(cfg.Workers, kind)
	if worker == nil && !ok {
		tb.Fatalf("batontest: Work: no worker given, and Config.Workers registers none for kind %q", kind)
		return nil
	}
	if o.Worker != nil {
		settings = *o.Worker
	}
	// The kind alone, with its settings: what the handler receives is
	// seen on the way in.
	var seen *baton.Job[T]
	workers := baton.NewWorkers()
	err := baton.AddWorkerSafely(workers, baton.WorkFunc[T](func(ctx context.Context, job *baton.Job[T]) error {
		seen = job
		if worker != nil {
			return worker.Work(ctx, job)
		}
		return registered(ctx, job.JobRow)
	}), &settings)
	if err != nil {
		tb.Fatalf("batontest: Work: %v", err)
		return nil
	}
	cfg.Workers, cfg.PeriodicJobs = workers, nil
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	driver := batonmem.New()
	client, err := baton.NewClient(driver, &cfg)
	if err != nil {
		tb.Fatalf("batontest: Work: %v", err)
		return nil
	}
	row := lease(ctx, tb, client, driver, args, o)
	if row == nil {
		return nil
	}
	att, err := attempt(ctx, client, row)
	if err != nil {
		tb.Fatalf("batontest: Work: %v", err)
		return nil
	}
	out := &WorkResult[T]{Job: seen, Err: att.Err, Outcome: baton.JobOutcomeLost}
	if out.Job == nil {
		out.Job = &baton.Job[T]{JobRow: row}
		_ = json.Unmarshal(row.Args, &out.Job.Args) // as far as they decode
	}
	if f := att.Finish; f != nil {
		out.Outcome, out.Delay = f.Outcome, f.Delay
	}
	out.Recorded, err = client.JobGet(context.WithoutCancel(ctx), row.Queue, row.ID)
	if err != nil && !errors.Is(err, baton.ErrJobNotFound) {
		tb.Fatalf("batontest: Work: %v", err)
		return nil
	}
	return out
}

// lease inserts a job of args through client and leases it from driver,
// its backend, at the attempt opts ask for: it records as many failed
// attempts before it. It fails the test and returns nil if it cannot.
func lease(ctx context.Context, tb testing.TB, client *baton.Client, driver batondriver.JobDriver, args baton.JobArgs, o WorkOpts) *baton.JobRow {
	tb.Helper()
	ins := baton.InsertOpts{}
	if o.Insert != nil {
		ins = *o.Insert
	}
	ins.Delay, ins.RunAt = 0, time.Time{}
	res, err := client.Insert(ctx, args, &ins)
	if err != nil {
		tb.Fatalf("batontest: Work: %v", err)
		return nil
	}
	inserted := res.Job
	if o.Attempt == 0 {
		o.Attempt = 1
	}
	if o.Attempt < 0 || o.Attempt > inserted.MaxAttempts {
		tb.Fatalf("batontest: Work: Attempt %d is out of range 1..%d (the job's MaxAttempts)", o.Attempt, inserted.MaxAttempts)
		return nil
	}
	for attempt := 1; ; attempt++ {
		fetched, err := driver.JobFetch(ctx, &batondriver.JobFetchParams{Queue: inserted.Queue, Max: 1, LeaseTTL: time.Hour})
		if err != nil || len(fetched.Jobs) != 1 {
			tb.Fatalf("batontest: Work: job %s of kind %q (%s) could not be leased: %v", inserted.ID, inserted.Kind, inserted.State, err)
			return nil
		}
		row := fetched.Jobs[0]
		if attempt == o.Attempt {
			return row
		}
		fail := &batondriver.JobFinish{
			JobLease: batondriver.JobLease{ID: row.ID, Lease: row.Lease},
			Outcome:  baton.JobOutcomeRetry,
			Error:    fmt.Sprintf("batontest: attempt %d failed", attempt),
		}
		if _, err := driver.JobFinish(ctx, &batondriver.JobFinishParams{Queue: row.Queue, Finished: []*batondriver.JobFinish{fail}}); err != nil {
			tb.Fatalf("batontest: Work: failing attempt %d: %v", attempt, err)
			return nil
		}
	}
}

// kindOf and attempt are package baton's own, through internal/testbridge:
// a kind's registration, and one attempt run and recorded as a client's
// workers do.
var (
	kindOf  = testbridge.Kind.(func(*baton.Workers, string) (baton.WorkerOpts, func(context.Context, *baton.JobRow) error, bool))
	attempt = testbridge.Attempt.(func(context.Context, *baton.Client, *baton.JobRow) (*testbridge.Attempted, error))
)
