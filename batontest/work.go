package batontest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
)

// WorkOpts are the options of Work; nil means the defaults.
type WorkOpts struct {
	// Worker are the kind's settings, as given to baton.AddWorker: the
	// job's queue, MaxAttempts, Timeout, Concurrency and Unique follow
	// them. nil: the defaults.
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

// WorkResult is the attempt Work ran.
type WorkResult[T baton.JobArgs] struct {
	// Job is the job as the handler received it.
	Job *baton.Job[T]
	// Err is what the handler returned.
	Err error
	// Outcome and Delay are what a worker records for Err
	// (baton.OutcomeOf): JobOutcomeCompleted for nil, JobOutcomeSnooze or
	// JobOutcomeAgain with its delay, JobOutcomeCancel, else
	// JobOutcomeRetry (delay 0: the worker waits the kind's Backoff) —
	// which makes the job dead if Job.Attempt is its MaxAttempts.
	Outcome baton.JobOutcome
	Delay   time.Duration
}

// Work runs worker's handler once for a job of args, in the calling
// goroutine, and returns what it returned and what a worker would make of
// it. The job is inserted, with opts, into a private in-memory backend of
// Work's own and leased from it as a worker leases it, so the handler sees
// a real job: an ID, its queue, Attempt 1 (or opts.Attempt), its
// concurrency key and that key's fencing token, MaxAttempts, tags, and
// args that went through JSON as stored args do (a field JSON drops is
// lost here as in production). The handler's context ends after the
// kind's Timeout (WorkerOpts.Timeout; 0: 1 minute, Config.JobTimeout's
// default; negative: never), or with ctx.
//
// Work does not start a client: no middleware runs, the job's lease is
// not renewed, and the outcome is not recorded. A panic in the handler is
// not recovered (a worker would retry the job): it fails the test as any
// panic does. Work fails the test with tb.Fatalf if args or opts are
// invalid, as Client.Insert would refuse them.
func Work[T baton.JobArgs](ctx context.Context, tb testing.TB, worker baton.Worker[T], args T, opts *WorkOpts) *WorkResult[T] {
	tb.Helper()
	o := WorkOpts{}
	if opts != nil {
		o = *opts
	}
	ins := baton.InsertOpts{}
	if o.Insert != nil {
		ins = *o.Insert
	}
	ins.Delay, ins.RunAt = 0, time.Time{}
	driver := batonmem.New()
	workers := baton.NewWorkers()
	if err := baton.AddWorkerSafely(workers, worker, o.Worker); err != nil {
		tb.Fatalf("batontest: Work: %v", err)
		return nil
	}
	client, err := baton.NewClient(driver, &baton.Config{Workers: workers, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatalf("batontest: Work: %v", err)
		return nil
	}
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
	var row *baton.JobRow
	for attempt := 1; ; attempt++ {
		fetched, err := driver.JobFetch(ctx, &batondriver.JobFetchParams{Queue: inserted.Queue, Max: 1, LeaseTTL: time.Hour})
		if err != nil || len(fetched.Jobs) != 1 {
			tb.Fatalf("batontest: Work: job %s of kind %q (%s) could not be leased: %v", inserted.ID, inserted.Kind, inserted.State, err)
			return nil
		}
		row = fetched.Jobs[0]
		if attempt == o.Attempt {
			break
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
	job := &baton.Job[T]{JobRow: row}
	if err := json.Unmarshal(row.Args, &job.Args); err != nil {
		tb.Fatalf("batontest: Work: args %s of kind %q do not decode into %T: %v", row.Args, row.Kind, job.Args, err)
		return nil
	}
	timeout := time.Minute
	if o.Worker != nil && o.Worker.Timeout != 0 {
		timeout = o.Worker.Timeout
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	out := &WorkResult[T]{Job: job, Err: worker.Work(ctx, job)}
	out.Outcome, out.Delay = baton.OutcomeOf(out.Err)
	return out
}
