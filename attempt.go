package baton

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/batonhq/baton/batondriver"
)

// An attempt is one run of a job's handler: the kind's worker through the
// worker middleware (the client's, then the kind's) within the kind's
// timeout, and the outcome to record for what it returned. A client's
// workers (runner.go) run every attempt so, and package batontest its one
// attempt (testbridge.go).

// attemptTimeout is how long an attempt of kind may run: the kind's
// Timeout, else Config.JobTimeout; not positive: no bound (a kind without
// a worker does not run).
func (c *config) attemptTimeout(kind string) time.Duration {
	kw := c.Workers.kinds[kind]
	if kw == nil {
		return 0
	}
	if kw.opts.Timeout != 0 {
		return kw.opts.Timeout
	}
	return c.JobTimeout
}

// attempt runs one attempt of row, leased from queue, and returns what to
// record for it (nil when nothing may be: the lease was lost) and the
// error the attempt returned. ctx is the
// execution's context, whose cause (ErrLeaseLost, ErrStopping,
// ErrJobCancelled) steers the outcome; the handler's context ends after
// timeout too, if it is positive. Config.OnJobEnd is told before it
// returns.
func (c *config) attempt(ctx context.Context, queue string, row *JobRow, timeout time.Duration) (*batondriver.JobFinish, error) {
	began := time.Now()
	out := &attemptOutput{}
	err := c.run(context.WithValue(ctx, outputKey{}, out), row, timeout)
	f := c.outcome(ctx, queue, row, err)
	if f != nil && (f.Outcome == JobOutcomeCompleted || f.Outcome == JobOutcomeAgain) {
		f.Output = out.get() // RecordOutput's, stored by the completions
	}
	if c.OnJobEnd != nil {
		ev := &JobEvent{ID: row.ID, Queue: queue, Kind: row.Kind, Key: row.Key, Fence: row.Fence, Outcome: JobOutcomeLost, Attempt: row.Attempt,
			Wait: max(row.AttemptedAt.Sub(row.RunAt), 0), Run: time.Since(began), Err: err}
		if f != nil {
			ev.Outcome = f.Outcome
		}
		c.OnJobEnd(ev)
	}
	return f, err
}

// run calls the kind's worker through the client's and the kind's
// middleware, with the timeout, turning a panic into an error.
func (c *config) run(ctx context.Context, row *JobRow, timeout time.Duration) (err error) {
	kw := c.Workers.kinds[row.Kind]
	if kw == nil {
		return &unknownKindError{kind: row.Kind}
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	// A panic in the handler or in a middleware is the attempt's error:
	// the handler's is recovered where it happens, so that the middleware
	// see it as an error, a middleware's at the top.
	call := func(ctx context.Context) (err error) {
		defer recoverPanic(&err)
		return kw.run(ctx, row)
	}
	// The kind's middleware inside the client's.
	call = wrap(call, row, kw.opts.Middleware)
	call = wrap(call, row, c.WorkerMiddleware)
	defer recoverPanic(&err)
	return call(ctx)
}

// wrap returns call wrapped in mws for row, the first outermost.
func wrap(call func(context.Context) error, row *JobRow, mws []WorkerMiddleware) func(context.Context) error {
	for i := len(mws) - 1; i >= 0; i-- {
		mw, next := mws[i], call
		call = func(ctx context.Context) error { return mw(ctx, row, next) }
	}
	return call
}

// recoverPanic, deferred, turns a panic into *err.
func recoverPanic(err *error) {
	if p := recover(); p != nil {
		*err = &PanicError{Value: p, Stack: debug.Stack()}
	}
}

type unknownKindError struct{ kind string }

func (e *unknownKindError) Error() string {
	return fmt.Sprintf("baton: no worker registered for kind %q", e.kind)
}

// outcome turns a handler's return into what the backend records; nil
// when nothing may be recorded (the lease was lost). ctx is the
// execution's context.
func (c *config) outcome(ctx context.Context, queue string, row *JobRow, err error) *batondriver.JobFinish {
	// The job's logger is made only for the outcomes that log: a success,
	// the common case, costs none.
	log := func() *slog.Logger {
		return c.Logger.With("job_id", row.ID, "kind", row.Kind, "queue", queue, "attempt", row.Attempt)
	}
	f := &batondriver.JobFinish{JobLease: batondriver.JobLease{ID: row.ID, Lease: row.Lease}}
	cause := context.Cause(ctx)
	if errors.Is(cause, ErrLeaseLost) {
		log().Warn("baton: job lease lost; its outcome is not recorded", "err", err)
		return nil
	}
	if err != nil && errors.Is(cause, ErrStopping) {
		// A zero RunAt is "now" by the backend's clock: available at once,
		// in its key's place still.
		f.Outcome, f.GiveBack = batondriver.JobOutcomeSnooze, true
		log().Info("baton: job returned to its queue at stop")
		return f
	}
	if err != nil && errors.Is(cause, ErrJobCancelled) {
		// The backend ends the job cancelled whatever is recorded but a
		// completion; recorded as a cancel, the outcome says so here too.
		// The context's own error adds nothing to the request's reason.
		f.Outcome = batondriver.JobOutcomeCancel
		if !errors.Is(err, ErrJobCancelled) && !errors.Is(err, context.Canceled) {
			f.Error = errorText(err)
		}
		log().Info("baton: job cancelled by an admin", "err", err)
		return f
	}
	// The handler's return alone decides the rest, as OutcomeOf says.
	outcome, delay := OutcomeOf(err)
	f.Outcome = outcome
	switch outcome {
	case JobOutcomeCompleted:
	case JobOutcomeSnooze, JobOutcomeAgain:
		f.Delay = delay
	case JobOutcomeCancel:
		f.Error = errorText(err)
		log().Info("baton: job cancelled by its handler", "err", err)
	case JobOutcomeDead:
		f.Error = errorText(err)
		log().Error("baton: job cannot run; moved to the dead set", "err", err)
	default:
		// An unknown kind too: another process sharing the queue, or this
		// one after a deploy, may have its worker. It is retried with the
		// client's backoff and goes dead, with the reason, once its
		// attempts are used up.
		backoff := c.Backoff
		if kw := c.Workers.kinds[row.Kind]; kw != nil && kw.opts.Backoff != nil {
			backoff = kw.opts.Backoff
		}
		f.Error, f.Delay = errorText(err), max(backoff(row.Attempt), 0)
		var unknown *unknownKindError
		var panicked *PanicError
		if errors.As(err, &unknown) {
			log().Warn("baton: no worker for the job's kind in this process; retried later", "err", err, "max_attempts", row.MaxAttempts)
		} else if errors.As(err, &panicked) {
			log().Error("baton: job panicked", "err", err, "max_attempts", row.MaxAttempts, "stack", string(panicked.Stack))
		} else {
			log().Warn("baton: job failed", "err", err, "max_attempts", row.MaxAttempts)
		}
	}
	return f
}

// errorText is what the backend records of an attempt's error: its text,
// and for a panic the stack where it was recovered, which the text leaves
// out.
func errorText(err error) string {
	var p *PanicError
	if errors.As(err, &p) && len(p.Stack) > 0 {
		return err.Error() + "\n\n" + string(p.Stack)
	}
	return err.Error()
}
