package batontest

import (
	"cmp"
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

// WorkOpts are the options of Work and WorkJob; nil means the defaults.
type WorkOpts struct {
	// Config is the configuration of the client the job runs under, as in
	// production: its WorkerMiddleware wrap the attempt, outermost first,
	// outside the kind's own, and its InsertMiddleware Work's insert; its
	// JobTimeout, MaxAttempts and Backoff are the defaults of a kind that
	// sets none; its OnJobEnd hears of the attempt; its
	// CompletedRetention, if negative, deletes a completed job at once. If
	// its Workers register T's kind, the kind's settings there are the
	// job's, and its worker runs when none is given. Its Logger gets the
	// worker's logs (nil: they are discarded, not sent to slog.Default).
	// Queues, Concurrency, PeriodicJobs and the other settings of a
	// running pool play no part. nil: the defaults.
	Config *baton.Config
	// Worker are the kind's settings, as given to baton.AddWorker: the
	// attempt's Timeout, the retry's Backoff and the Middleware that wrap
	// the attempt follow them, and so, for Work, do the job's queue,
	// MaxAttempts, Concurrency and Unique (WorkJob's job has its own).
	// They replace the settings Config.Workers registers for the kind.
	// nil: those, else the defaults.
	Worker *baton.WorkerOpts
	// Insert are the options of Work's insert, as given to Client.Insert;
	// Delay and RunAt are ignored, since Work runs the job at once. nil:
	// the defaults. WorkJob, whose job is inserted already, takes none.
	Insert *baton.InsertOpts
	// Attempt is the attempt the handler sees: a later one N has the N-1
	// attempts before it failed, and recorded in Job.Errors, as a worker's
	// retries would leave them. It must not exceed the job's MaxAttempts.
	// Default 0: Work's 1, WorkJob's the one a worker runs next.
	Attempt int
}

// WorkResult is the attempt Work or WorkJob ran, and what became of it.
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
	// cancelled), its RunAt, Errors, Runs and the Output the handler
	// recorded (baton.RecordOutput). nil only if the backend keeps it no
	// more (Config.CompletedRetention negative).
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
// kind's WorkerOpts.Middleware, its context ended after the kind's Timeout
// (WorkerOpts.Timeout, else Config.JobTimeout, 1 minute by default;
// negative: never) or with ctx, and a panic in the handler or a
// middleware recovered as its error.
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
// twin. Work fails the test with tb.Fatalf if args or opts are invalid, as
// NewClient, AddWorker or Client.Insert would refuse them, or if worker is
// nil and Config.Workers registers no worker for T's kind.
func Work[T baton.JobArgs](ctx context.Context, tb testing.TB, worker baton.Worker[T], args T, opts *WorkOpts) *WorkResult[T] {
	tb.Helper()
	b := newBench(tb, "Work", worker, opts)
	if b == nil {
		return nil
	}
	ins := baton.InsertOpts{}
	if b.opts.Insert != nil {
		ins = *b.opts.Insert
	}
	ins.Delay, ins.RunAt = 0, time.Time{}
	res, err := b.client.Insert(ctx, args, &ins)
	if err != nil {
		b.fatalf(tb, "%v", err)
		return nil
	}
	return b.work(ctx, tb, res.Job, "", cmp.Or(b.opts.Attempt, 1), 0, nil)
}

// WorkJob runs worker's handler once for row, a job already stored in a
// backend, as Work does for a job it inserts, and returns what became of
// the attempt: for a job that the code under test inserted, found with
// RequireInserted, Client.JobGet or Client.JobList. worker nil runs the
// worker opts.Config.Workers registers for T's kind, which must be row's.
//
// A copy of row runs, on a private in-memory backend as Work's job does:
// row, and the backend it came from, are left as they are, whatever the
// outcome (a client's own worker may still run the job there). The
// handler sees the job as a worker that leased it would: row's ID, queue,
// priority, args as stored, tags, metadata, MaxAttempts, concurrency key
// and limit, unique key and scope, and Runs; at the attempt after
// row.Attempt, the one a worker runs next (or opts.Attempt), with an
// error recorded for each attempt before it: row's for that attempt, else
// "batontest: attempt N failed". Its fencing token, lease and times are
// the copy's. The kind's Timeout, Backoff and Middleware follow
// opts.Worker, else Config.Workers, and ctx's cause steers the outcome,
// as in Work. Row's state plays no part: a completed or dead job runs as
// one a worker leased. The Recorded job has row's ID.
//
// WorkJob fails the test with tb.Fatalf if row is nil or of another kind
// than T's, if opts.Insert is set, if the attempt is out of range (a job
// whose attempts are used up has none next: give opts.Attempt), or for
// what Work fails on.
func WorkJob[T baton.JobArgs](ctx context.Context, tb testing.TB, worker baton.Worker[T], row *baton.JobRow, opts *WorkOpts) *WorkResult[T] {
	tb.Helper()
	var zero T
	switch {
	case row == nil:
		tb.Fatalf("batontest: WorkJob: nil row")
		return nil
	case row.Kind != zero.Kind():
		tb.Fatalf("batontest: WorkJob: job %s is of kind %q, not %q", row.ID, row.Kind, zero.Kind())
		return nil
	case opts != nil && opts.Insert != nil:
		tb.Fatalf("batontest: WorkJob: WorkOpts.Insert is Work's: job %s is inserted already", row.ID)
		return nil
	}
	attempt := row.Attempt + 1 // the one a worker runs next
	if opts != nil && opts.Attempt != 0 {
		attempt = opts.Attempt
	} else if attempt > row.MaxAttempts {
		tb.Fatalf("batontest: WorkJob: job %s has used its %d attempts: none runs next (set WorkOpts.Attempt to run one)", row.ID, row.MaxAttempts)
		return nil
	}
	b := newBench(tb, "WorkJob", worker, opts)
	if b == nil {
		return nil
	}
	ins := &batondriver.JobInsert{Kind: row.Kind, Args: row.Args, Priority: row.Priority, MaxAttempts: row.MaxAttempts,
		Tags: row.Tags, Metadata: row.Metadata, Key: row.Key, Limit: row.Limit, OnBusy: row.OnBusy}
	if row.OnBusy == baton.OnBusyReschedule {
		ins.BusyDelay = time.Millisecond // which no row records; no job holds the key here
	}
	if row.Unique != "" {
		// The period, which no row records, plays no part: no twin here.
		ins.Unique = &batondriver.JobUnique{Key: row.Unique, Scope: row.UniqueScope, Period: time.Hour}
	}
	res, err := b.driver.JobInsert(ctx, &batondriver.JobInsertParams{Queue: row.Queue, Jobs: []*batondriver.JobInsert{ins}})
	if err == nil && (len(res.Jobs) != 1 || res.Jobs[0] == nil || res.Status[0] != batondriver.JobInserted) {
		err = fmt.Errorf("the copy was not inserted: %v", res.Status)
	}
	if err != nil {
		b.fatalf(tb, "copying job %s: %v", row.ID, err)
		return nil
	}
	return b.work(ctx, tb, res.Jobs[0], row.ID, attempt, row.Runs, row.Errors)
}

// bench is the private client and backend, with T's kind alone
// registered, on which Work or WorkJob runs one job.
type bench[T baton.JobArgs] struct {
	name   string // the helper's, for its failures
	opts   WorkOpts
	client *baton.Client
	driver batondriver.JobDriver
	seen   *baton.Job[T] // the job the handler received
}

// newBench sets up a bench for worker, or the worker opts.Config.Workers
// registers for T's kind if nil, with opts. It fails the test and returns
// nil if it cannot.
func newBench[T baton.JobArgs](tb testing.TB, name string, worker baton.Worker[T], opts *WorkOpts) *bench[T] {
	tb.Helper()
	b := &bench[T]{name: name}
	if opts != nil {
		b.opts = *opts
	}
	cfg := baton.Config{}
	if b.opts.Config != nil {
		cfg = *b.opts.Config
	}
	var zero T
	kind := zero.Kind()
	settings, registered, ok := kindOf(cfg.Workers, kind)
	if worker == nil && !ok {
		b.fatalf(tb, "no worker given, and Config.Workers registers none for kind %q", kind)
		return nil
	}
	if b.opts.Worker != nil {
		settings = *b.opts.Worker
	}
	// The kind alone, with its settings: what the handler receives is
	// seen on the way in.
	workers := baton.NewWorkers()
	err := baton.AddWorkerSafely(workers, baton.WorkFunc[T](func(ctx context.Context, job *baton.Job[T]) error {
		b.seen = job
		if worker != nil {
			return worker.Work(ctx, job)
		}
		return registered(ctx, job.JobRow)
	}), &settings)
	if err != nil {
		b.fatalf(tb, "%v", err)
		return nil
	}
	cfg.Workers, cfg.PeriodicJobs = workers, nil
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	b.driver = batonmem.New()
	if b.client, err = baton.NewClient(b.driver, &cfg); err != nil {
		b.fatalf(tb, "%v", err)
		return nil
	}
	return b
}

// fatalf fails the test with the helper's name before the message.
func (b *bench[T]) fatalf(tb testing.TB, format string, args ...any) {
	tb.Helper()
	tb.Fatalf("batontest: "+b.name+": "+format, args...)
}

// work leases inserted, a job of b's backend, at attempt after
// runs runs ended by JobAgain, runs it and records its outcome as a
// worker does, and returns what became of it. id, if not empty, is the ID
// the handler, OnJobEnd and the result see instead of the backend's.
// errs are the errors to record for the failed attempts before attempt,
// by their number.
func (b *bench[T]) work(ctx context.Context, tb testing.TB, inserted *baton.JobRow, id string, attempt, runs int, errs []baton.AttemptError) *WorkResult[T] {
	tb.Helper()
	row := b.lease(ctx, tb, inserted, attempt, runs, errs)
	if row == nil {
		return nil
	}
	leased := row.ID
	if id != "" {
		row.ID = id
	}
	att, err := runAttempt(ctx, b.client, row, leased)
	if err != nil {
		b.fatalf(tb, "%v", err)
		return nil
	}
	out := &WorkResult[T]{Job: b.seen, Err: att.Err, Outcome: baton.JobOutcomeLost}
	if out.Job == nil {
		out.Job = &baton.Job[T]{JobRow: row}
		_ = json.Unmarshal(row.Args, &out.Job.Args) // as far as they decode
	}
	if f := att.Finish; f != nil {
		out.Outcome, out.Delay = f.Outcome, f.Delay
	}
	out.Recorded, err = b.client.JobGet(context.WithoutCancel(ctx), row.Queue, leased)
	if err != nil && !errors.Is(err, baton.ErrJobNotFound) {
		b.fatalf(tb, "%v", err)
		return nil
	}
	if out.Recorded != nil {
		out.Recorded.ID = row.ID
	}
	return out
}

// lease leases inserted from b's backend at attempt: it first runs it
// again runs times, as JobAgain does, then fails as many attempts before
// the one asked for, recording the text errs holds for each (the latest,
// for a number errs holds twice). It fails the test and returns nil if it
// cannot.
func (b *bench[T]) lease(ctx context.Context, tb testing.TB, inserted *baton.JobRow, attempt, runs int, errs []baton.AttemptError) *baton.JobRow {
	tb.Helper()
	if attempt < 1 || attempt > inserted.MaxAttempts {
		b.fatalf(tb, "Attempt %d is out of range 1..%d (the job's MaxAttempts)", attempt, inserted.MaxAttempts)
		return nil
	}
	fetch := func() *baton.JobRow {
		fetched, err := b.driver.JobFetch(ctx, &batondriver.JobFetchParams{Queue: inserted.Queue, Max: 1, LeaseTTL: time.Hour})
		if err != nil || len(fetched.Jobs) != 1 {
			b.fatalf(tb, "job %s of kind %q (%s) could not be leased: %v", inserted.ID, inserted.Kind, inserted.State, err)
			return nil
		}
		return fetched.Jobs[0]
	}
	finish := func(row *baton.JobRow, outcome baton.JobOutcome, text string) bool {
		f := &batondriver.JobFinish{JobLease: batondriver.JobLease{ID: row.ID, Lease: row.Lease}, Outcome: outcome, Error: text}
		if _, err := b.driver.JobFinish(ctx, &batondriver.JobFinishParams{Queue: row.Queue, Finished: []*batondriver.JobFinish{f}}); err != nil {
			b.fatalf(tb, "recording attempt %d of job %s: %v", row.Attempt, inserted.ID, err)
			return false
		}
		return true
	}
	for range runs {
		if row := fetch(); row == nil || !finish(row, baton.JobOutcomeAgain, "") {
			return nil
		}
	}
	for n := 1; ; n++ {
		row := fetch()
		if row == nil || n == attempt {
			return row
		}
		text := fmt.Sprintf("batontest: attempt %d failed", n)
		for _, e := range errs {
			if e.Attempt == n {
				text = e.Error
			}
		}
		if !finish(row, baton.JobOutcomeRetry, text) {
			return nil
		}
	}
}

// kindOf and runAttempt are package baton's own, through internal/testbridge:
// a kind's registration, and one attempt run and recorded as a client's
// workers do.
var (
	kindOf     = testbridge.Kind.(func(*baton.Workers, string) (baton.WorkerOpts, func(context.Context, *baton.JobRow) error, bool))
	runAttempt = testbridge.Attempt.(func(context.Context, *baton.Client, *baton.JobRow, string) (*testbridge.Attempted, error))
)
