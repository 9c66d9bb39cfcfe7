package batontest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batontest"
)

type webhookArgs struct {
	Customer string `json:"customer"`
	Secret   string `json:"-"` // not stored: a worker never sees it
}

func (webhookArgs) Kind() string { return "webhook" }

var byCustomer = &baton.ConcurrencyOpts{
	Key:   baton.KeyOf(func(a webhookArgs) string { return "customer:" + a.Customer }),
	Limit: 2,
}

// The handler sees the job a worker would: leased from a backend, with
// its ID, queue, attempt, key and fence, and args that went through JSON.
func TestWork(t *testing.T) {
	t.Parallel()
	var seen *baton.Job[webhookArgs]
	var seenCtx context.Context
	w := baton.WorkFunc[webhookArgs](func(ctx context.Context, job *baton.Job[webhookArgs]) error {
		seen, seenCtx = job, ctx
		return baton.RecordOutput(ctx, map[string]string{"delivered": job.Args.Customer})
	})
	res := work(t, t.Context(), w, webhookArgs{Customer: "acme", Secret: "s3cret"}, &batontest.WorkOpts{
		Worker: &baton.WorkerOpts{Queue: "hooks", Concurrency: byCustomer, MaxAttempts: 5},
		Insert: &baton.InsertOpts{Priority: 4, Tags: []string{"eu"}, Delay: time.Hour},
	})
	require.Same(t, seen, res.Job)
	require.NoError(t, res.Err)
	require.Equal(t, baton.JobOutcomeCompleted, res.Outcome)
	require.Zero(t, res.Delay)
	require.JSONEq(t, `{"delivered":"acme"}`, string(res.Recorded.Output), "the output the handler recorded")

	job := res.Job
	require.Len(t, job.ID, 26)
	require.Equal(t, "webhook", job.Kind)
	require.Equal(t, "hooks", job.Queue)
	require.Equal(t, baton.JobStateRunning, job.State)
	require.Equal(t, 1, job.Attempt)
	require.Equal(t, 5, job.MaxAttempts)
	require.Equal(t, 4, job.Priority)
	require.Equal(t, []string{"eu"}, job.Tags)
	require.Equal(t, "customer:acme", job.Key)
	require.Equal(t, 2, job.Limit)
	require.Positive(t, job.Fence)
	require.Equal(t, webhookArgs{Customer: "acme"}, job.Args, "args go through JSON")
	deadline, ok := seenCtx.Deadline()
	require.True(t, ok)
	require.WithinDuration(t, time.Now().Add(time.Minute), deadline, 5*time.Second, "the default timeout is a minute")

	require.NotSame(t, job.JobRow, res.Recorded)
	require.Equal(t, baton.JobStateCompleted, res.Recorded.State)
	require.Equal(t, job.Fence, res.Recorded.Fence)

	// A completed job the Config keeps for no time is gone at once.
	res = work(t, t.Context(), w, webhookArgs{}, &batontest.WorkOpts{Config: &baton.Config{CompletedRetention: -1}})
	require.Equal(t, baton.JobOutcomeCompleted, res.Outcome)
	require.Nil(t, res.Recorded)
}

// Each return is read, and recorded, as a worker does: the outcome, when
// the job runs again, and the job as the backend holds it after.
func TestWorkOutcomes(t *testing.T) {
	t.Parallel()
	hour := func(int) time.Duration { return time.Hour }
	for _, tc := range []struct {
		err      error
		attempt  int
		outcome  baton.JobOutcome
		delay    time.Duration
		state    baton.JobState
		attempts int // Recorded.Attempt: a snooze does not count its attempt
		runs     int
	}{
		{nil, 1, baton.JobOutcomeCompleted, 0, baton.JobStateCompleted, 1, 0},
		{baton.JobSnooze(time.Minute), 1, baton.JobOutcomeSnooze, time.Minute, baton.JobStateScheduled, 0, 0},
		{baton.JobSnooze(0), 1, baton.JobOutcomeSnooze, 0, baton.JobStateAvailable, 0, 0},
		{baton.JobAgainIn(time.Second), 1, baton.JobOutcomeAgain, time.Second, baton.JobStateScheduled, 0, 1},
		{fmt.Errorf("wrapped: %w", baton.JobAgain()), 1, baton.JobOutcomeAgain, 0, baton.JobStateAvailable, 0, 1},
		{baton.JobCancel(errors.New("bad input")), 1, baton.JobOutcomeCancel, 0, baton.JobStateCancelled, 1, 0},
		{errors.New("upstream timeout"), 1, baton.JobOutcomeRetry, time.Hour, baton.JobStateScheduled, 1, 0},
		{errors.New("upstream timeout"), 3, baton.JobOutcomeRetry, time.Hour, baton.JobStateDead, 3, 0},
	} {
		w := baton.WorkFunc[syncArgs](func(context.Context, *baton.Job[syncArgs]) error { return tc.err })
		res := work(t, t.Context(), w, syncArgs{UserID: 1}, &batontest.WorkOpts{
			Worker: &baton.WorkerOpts{MaxAttempts: 3, Backoff: hour}, Attempt: tc.attempt,
		})
		name := fmt.Sprintf("%v at attempt %d", tc.err, tc.attempt)
		require.Equal(t, tc.err, res.Err, name)
		require.Equal(t, tc.outcome, res.Outcome, name)
		require.Equal(t, tc.delay, res.Delay, name)
		require.Equal(t, res.Job.ID, res.Recorded.ID, name)
		require.Equal(t, tc.state, res.Recorded.State, name)
		require.Equal(t, tc.attempts, res.Recorded.Attempt, name)
		require.Equal(t, tc.runs, res.Recorded.Runs, name)
		if tc.state == baton.JobStateScheduled {
			require.WithinDuration(t, time.Now().Add(tc.delay), res.Recorded.RunAt, 5*time.Second, name)
		}
		if tc.outcome == baton.JobOutcomeRetry || tc.outcome == baton.JobOutcomeCancel {
			last := res.Recorded.Errors[len(res.Recorded.Errors)-1]
			require.Equal(t, tc.attempt, last.Attempt, name)
			require.Equal(t, tc.err.Error(), last.Error, name)
		}
	}
}

// A later attempt comes after as many failed ones, recorded as a worker's
// retries record them.
func TestWorkLaterAttempt(t *testing.T) {
	t.Parallel()
	w := baton.WorkFunc[webhookArgs](func(context.Context, *baton.Job[webhookArgs]) error { return errors.New("still down") })
	var first, third *batontest.WorkResult[webhookArgs]
	f := run(func(tb testing.TB) {
		opts := &batontest.WorkOpts{Worker: &baton.WorkerOpts{Concurrency: byCustomer, MaxAttempts: 3}}
		first = batontest.Work(t.Context(), tb, w, webhookArgs{Customer: "acme"}, opts)
		opts.Attempt = 3
		third = batontest.Work(t.Context(), tb, w, webhookArgs{Customer: "acme"}, opts)
	})
	requirePassed(t, f)
	require.Equal(t, 3, third.Job.Attempt)
	require.Equal(t, third.Job.MaxAttempts, third.Job.Attempt, "the last attempt: a retry makes the job dead")
	require.Len(t, third.Job.Errors, 2)
	require.Equal(t, 2, third.Job.Errors[1].Attempt)
	require.Greater(t, third.Job.Fence, first.Job.Fence, "each attempt has a new fencing token")
	require.Equal(t, baton.JobOutcomeRetry, third.Outcome)
}

// The kind's Timeout ends the handler's context, else the Config's
// JobTimeout; a negative one sets none.
func TestWorkTimeout(t *testing.T) {
	t.Parallel()
	w := baton.WorkFunc[syncArgs](func(ctx context.Context, _ *baton.Job[syncArgs]) error {
		if _, ok := ctx.Deadline(); !ok {
			return errors.New("no deadline")
		}
		<-ctx.Done()
		return ctx.Err()
	})
	for _, opts := range []*batontest.WorkOpts{
		{Worker: &baton.WorkerOpts{Timeout: 10 * time.Millisecond}},
		{Config: &baton.Config{JobTimeout: 10 * time.Millisecond}},
		{Config: &baton.Config{JobTimeout: time.Hour}, Worker: &baton.WorkerOpts{Timeout: 10 * time.Millisecond}},
	} {
		res := work(t, t.Context(), w, syncArgs{}, opts)
		require.ErrorIs(t, res.Err, context.DeadlineExceeded)
		require.Equal(t, baton.JobOutcomeRetry, res.Outcome)
	}
	res := work(t, t.Context(), w, syncArgs{}, &batontest.WorkOpts{Worker: &baton.WorkerOpts{Timeout: -1}})
	require.EqualError(t, res.Err, "no deadline")
}

// The Config's worker middleware wrap the attempt, outermost first, and
// may change its outcome; a panic, in the handler or in a middleware, is
// the attempt's error, retried as a worker retries it.
func TestWorkMiddleware(t *testing.T) {
	t.Parallel()
	var trail []string
	mw := func(name string) baton.WorkerMiddleware {
		return func(ctx context.Context, job *baton.JobRow, next func(context.Context) error) error {
			trail = append(trail, name+" "+job.Kind)
			err := next(ctx)
			trail = append(trail, fmt.Sprintf("%s saw %v", name, err != nil))
			return err
		}
	}
	forgive := func(ctx context.Context, _ *baton.JobRow, next func(context.Context) error) error {
		if err := next(ctx); err != nil {
			return baton.JobSnooze(time.Minute)
		}
		return nil
	}
	panics := baton.WorkFunc[syncArgs](func(context.Context, *baton.Job[syncArgs]) error { panic("boom") })
	cfg := &baton.Config{WorkerMiddleware: []baton.WorkerMiddleware{mw("outer"), mw("inner")}}

	res := work(t, t.Context(), panics, syncArgs{}, &batontest.WorkOpts{Config: cfg})
	require.Equal(t, []string{"outer sync_user", "inner sync_user", "inner saw true", "outer saw true"}, trail)
	require.ErrorContains(t, res.Err, "panic: boom")
	require.Equal(t, baton.JobOutcomeRetry, res.Outcome)
	require.Equal(t, baton.JobStateScheduled, res.Recorded.State)
	require.Contains(t, res.Recorded.Errors[0].Error, "panic: boom")

	cfg = &baton.Config{WorkerMiddleware: []baton.WorkerMiddleware{forgive}}
	res = work(t, t.Context(), panics, syncArgs{}, &batontest.WorkOpts{Config: cfg})
	require.Equal(t, baton.JobOutcomeSnooze, res.Outcome)
	require.Equal(t, time.Minute, res.Delay)

	ran := false
	ok := baton.WorkFunc[syncArgs](func(context.Context, *baton.Job[syncArgs]) error { ran = true; return nil })
	cfg = &baton.Config{WorkerMiddleware: []baton.WorkerMiddleware{
		func(context.Context, *baton.JobRow, func(context.Context) error) error { panic("in a middleware") },
	}}
	res = work(t, t.Context(), ok, syncArgs{UserID: 7}, &batontest.WorkOpts{Config: cfg})
	require.False(t, ran)
	require.ErrorContains(t, res.Err, "panic: in a middleware")
	require.Equal(t, baton.JobOutcomeRetry, res.Outcome)
	require.Equal(t, 7, res.Job.Args.UserID, "the job as leased, though the handler did not run")
}

// The kind's own middleware wrap the attempt inside the Config's, whether
// the kind's settings come from Config.Workers or from WorkOpts.Worker.
func TestWorkKindMiddleware(t *testing.T) {
	t.Parallel()
	var trail []string
	mw := func(name string) baton.WorkerMiddleware {
		return func(ctx context.Context, _ *baton.JobRow, next func(context.Context) error) error {
			trail = append(trail, name)
			err := next(ctx)
			trail = append(trail, fmt.Sprintf("%s saw %v", name, err))
			return err
		}
	}
	forgive := func(ctx context.Context, _ *baton.JobRow, next func(context.Context) error) error {
		if err := next(ctx); err != nil {
			return baton.JobSnooze(time.Minute)
		}
		return nil
	}
	fails := baton.WorkFunc[syncArgs](func(context.Context, *baton.Job[syncArgs]) error {
		trail = append(trail, "handler")
		return errors.New("down")
	})
	workers := baton.NewWorkers()
	baton.AddWorker(workers, fails, &baton.WorkerOpts{Middleware: []baton.WorkerMiddleware{mw("kind"), forgive}})
	cfg := &baton.Config{Workers: workers, WorkerMiddleware: []baton.WorkerMiddleware{mw("client")}}

	res := work(t, t.Context(), nil, syncArgs{}, &batontest.WorkOpts{Config: cfg})
	require.Equal(t, []string{"client", "kind", "handler", "kind saw baton: snoozed for 1m0s", "client saw baton: snoozed for 1m0s"}, trail)
	require.Equal(t, baton.JobOutcomeSnooze, res.Outcome)

	trail = nil
	res = work(t, t.Context(), fails, syncArgs{}, &batontest.WorkOpts{Config: cfg})
	require.Equal(t, baton.JobOutcomeSnooze, res.Outcome, "the test's handler, the registered kind's middleware")
	require.Equal(t, "handler", trail[2])

	trail = nil
	res = work(t, t.Context(), fails, syncArgs{}, &batontest.WorkOpts{Worker: &baton.WorkerOpts{Middleware: []baton.WorkerMiddleware{mw("given")}}})
	require.Equal(t, []string{"given", "handler", "given saw down"}, trail)
	require.Equal(t, baton.JobOutcomeRetry, res.Outcome)

	f := run(func(tb testing.TB) {
		batontest.Work(t.Context(), tb, fails, syncArgs{}, &batontest.WorkOpts{Worker: &baton.WorkerOpts{Middleware: []baton.WorkerMiddleware{nil}}})
	})
	requireFatal(t, f, "batontest: Work: ", "Middleware[0] is nil")
}

// A panic is a *baton.PanicError, found through a middleware's wrapping,
// with what panicked and where; its value steers nothing.
func TestWorkPanicError(t *testing.T) {
	t.Parallel()
	var events []*baton.JobEvent
	cfg := &baton.Config{
		WorkerMiddleware: []baton.WorkerMiddleware{func(ctx context.Context, _ *baton.JobRow, next func(context.Context) error) error {
			if err := next(ctx); err != nil {
				return fmt.Errorf("tenant 7: %w", err)
			}
			return nil
		}},
		OnJobEnd: func(ev *baton.JobEvent) { events = append(events, ev) },
	}
	faults := baton.WorkFunc[syncArgs](func(context.Context, *baton.Job[syncArgs]) error {
		var counts map[string]int
		counts["x"]++ // a runtime error
		return nil
	})
	res := work(t, t.Context(), faults, syncArgs{}, &batontest.WorkOpts{Config: cfg})
	var p *baton.PanicError
	require.ErrorAs(t, res.Err, &p)
	require.Same(t, p, events[0].Err.(interface{ Unwrap() error }).Unwrap(), "OnJobEnd hears the same error")
	var rerr runtime.Error
	require.ErrorAs(t, p.Value.(error), &rerr)
	require.EqualError(t, res.Err, "tenant 7: panic: assignment to entry in nil map", "the text leaves the stack out")
	require.Contains(t, string(p.Stack), "TestWorkPanicError", "the stack from the panic up")
	require.Equal(t, baton.JobOutcomeRetry, res.Outcome)
	recorded := res.Recorded.Errors[0].Error
	require.True(t, strings.HasPrefix(recorded, res.Err.Error()+"\n\n"), recorded)
	require.Contains(t, recorded, "TestWorkPanicError", "the job records the stack")

	snoozes := baton.WorkFunc[syncArgs](func(context.Context, *baton.Job[syncArgs]) error { panic(baton.JobSnooze(time.Minute)) })
	res = work(t, t.Context(), snoozes, syncArgs{}, nil)
	require.ErrorAs(t, res.Err, &p)
	require.Equal(t, baton.JobOutcomeRetry, res.Outcome, "a panic is a failure, whatever its value")
}

// A kind registered in Config.Workers runs with its settings there: its
// own worker when Work is given none, the test's otherwise; WorkOpts.Worker
// replaces those settings.
func TestWorkRegisteredKind(t *testing.T) {
	t.Parallel()
	var ran []string
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(_ context.Context, job *baton.Job[webhookArgs]) error {
		ran = append(ran, "registered "+job.Args.Customer)
		return errors.New("down")
	}), &baton.WorkerOpts{Queue: "hooks", MaxAttempts: 4, Concurrency: byCustomer, Backoff: func(n int) time.Duration { return time.Duration(n) * time.Minute }})
	cfg := &baton.Config{Workers: workers, Backoff: func(int) time.Duration { return time.Hour }}

	res := work(t, t.Context(), nil, webhookArgs{Customer: "acme"}, &batontest.WorkOpts{Config: cfg, Attempt: 2})
	require.Equal(t, []string{"registered acme"}, ran)
	require.Equal(t, "hooks", res.Job.Queue)
	require.Equal(t, 4, res.Job.MaxAttempts)
	require.Equal(t, "customer:acme", res.Job.Key)
	require.Equal(t, "acme", res.Job.Args.Customer, "the handler's job, decoded")
	require.Equal(t, baton.JobOutcomeRetry, res.Outcome)
	require.Equal(t, 2*time.Minute, res.Delay, "the kind's Backoff, of the attempt")

	mine := baton.WorkFunc[webhookArgs](func(context.Context, *baton.Job[webhookArgs]) error {
		ran = append(ran, "mine")
		return errors.New("down")
	})
	res = work(t, t.Context(), mine, webhookArgs{Customer: "acme"}, &batontest.WorkOpts{Config: cfg})
	require.Equal(t, []string{"registered acme", "mine"}, ran)
	require.Equal(t, "hooks", res.Job.Queue)
	require.Equal(t, time.Minute, res.Delay)

	res = work(t, t.Context(), nil, webhookArgs{Customer: "acme"}, &batontest.WorkOpts{Config: cfg, Worker: &baton.WorkerOpts{}})
	require.Equal(t, "default", res.Job.Queue)
	require.Equal(t, 25, res.Job.MaxAttempts)
	require.Empty(t, res.Job.Key)
	require.Equal(t, time.Hour, res.Delay, "the Config's Backoff")
}

// A cause given to ctx stands for what a worker's context would be
// cancelled for, and the outcome is a worker's.
func TestWorkCause(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cause   error
		outcome baton.JobOutcome
		state   baton.JobState
	}{
		{baton.ErrJobCancelled, baton.JobOutcomeCancel, baton.JobStateCancelled},
		{baton.ErrStopping, baton.JobOutcomeSnooze, baton.JobStateAvailable},
		{baton.ErrLeaseLost, baton.JobOutcomeLost, baton.JobStateRunning},
	} {
		ctx, cancel := context.WithCancelCause(t.Context())
		w := baton.WorkFunc[syncArgs](func(ctx context.Context, _ *baton.Job[syncArgs]) error {
			cancel(tc.cause)
			<-ctx.Done()
			return ctx.Err()
		})
		res := work(t, ctx, w, syncArgs{}, nil)
		require.ErrorIs(t, res.Err, context.Canceled)
		require.Equal(t, tc.outcome, res.Outcome, "%v", tc.cause)
		require.Equal(t, tc.state, res.Recorded.State, "%v", tc.cause)
	}
}

// Config.OnJobEnd hears of the attempt as a worker tells it.
func TestWorkOnJobEnd(t *testing.T) {
	t.Parallel()
	var events []*baton.JobEvent
	cfg := &baton.Config{OnJobEnd: func(ev *baton.JobEvent) { events = append(events, ev) }}
	w := baton.WorkFunc[webhookArgs](func(context.Context, *baton.Job[webhookArgs]) error { return baton.JobAgain() })
	res := work(t, t.Context(), w, webhookArgs{Customer: "acme"}, &batontest.WorkOpts{Config: cfg, Worker: &baton.WorkerOpts{Concurrency: byCustomer}})
	require.Len(t, events, 1)
	ev := events[0]
	require.Equal(t, res.Job.ID, ev.ID)
	require.Equal(t, "customer:acme", ev.Key)
	require.Equal(t, res.Job.Fence, ev.Fence)
	require.Equal(t, baton.JobOutcomeAgain, ev.Outcome)
	require.Equal(t, 1, ev.Attempt)
}

// work runs batontest.Work and requires that it passed.
func work[T baton.JobArgs](t *testing.T, ctx context.Context, w baton.Worker[T], args T, opts *batontest.WorkOpts) *batontest.WorkResult[T] {
	t.Helper()
	var res *batontest.WorkResult[T]
	requirePassed(t, run(func(tb testing.TB) { res = batontest.Work(ctx, tb, w, args, opts) }))
	return res
}

// brokenArgs cannot be decoded: a worker makes such a job dead at once.
type brokenArgs struct{}

func (brokenArgs) Kind() string                { return "broken" }
func (*brokenArgs) UnmarshalJSON([]byte) error { return errors.New("no way") }

func TestWorkUndecodableArgs(t *testing.T) {
	t.Parallel()
	ran := false
	w := baton.WorkFunc[brokenArgs](func(context.Context, *baton.Job[brokenArgs]) error { ran = true; return nil })
	res := work(t, t.Context(), w, brokenArgs{}, nil)
	require.False(t, ran)
	require.ErrorContains(t, res.Err, "cannot be decoded")
	require.Equal(t, baton.JobOutcomeDead, res.Outcome)
	require.Equal(t, baton.JobStateDead, res.Recorded.State)
}

// What Client.Insert or AddWorker would refuse fails the test, and the
// handler does not run.
func TestWorkFailsOnInvalidOptions(t *testing.T) {
	t.Parallel()
	ran := false
	w := baton.WorkFunc[syncArgs](func(context.Context, *baton.Job[syncArgs]) error { ran = true; return nil })
	for _, tc := range []struct {
		opts *batontest.WorkOpts
		want string
	}{
		{&batontest.WorkOpts{Insert: &baton.InsertOpts{Priority: 99}}, "priority 99 out of range 0..9"},
		{&batontest.WorkOpts{Insert: &baton.InsertOpts{Queue: "no spaces"}}, `"no spaces"`},
		{&batontest.WorkOpts{Worker: &baton.WorkerOpts{MaxAttempts: -1}}, "negative MaxAttempts"},
		{&batontest.WorkOpts{Insert: &baton.InsertOpts{MaxAttempts: 2}, Attempt: 3}, "Attempt 3 is out of range 1..2"},
		{&batontest.WorkOpts{Config: &baton.Config{MaxAttempts: -1}}, "Config.MaxAttempts is negative"},
	} {
		f := run(func(tb testing.TB) { batontest.Work(t.Context(), tb, w, syncArgs{}, tc.opts) })
		requireFatal(t, f, "batontest: Work: ", tc.want)
	}
	require.False(t, ran)

	f := run(func(tb testing.TB) {
		batontest.Work(t.Context(), tb, nil, syncArgs{}, &batontest.WorkOpts{Config: &baton.Config{Workers: baton.NewWorkers()}})
	})
	requireFatal(t, f, `batontest: Work: no worker given, and Config.Workers registers none for kind "sync_user"`)
}

// WorkJob runs a copy of a stored job: the handler sees the job the code
// under test inserted, with its ID, options and args as stored, and the
// backend it came from is left as it was.
func TestWorkJob(t *testing.T) {
	c := setup(t)
	ctx := t.Context()
	row := insert(t, c, webhookArgs{Customer: "acme", Secret: "s3cret"}, &baton.InsertOpts{
		Queue: "hooks", Priority: 2, MaxAttempts: 7, Tags: []string{"eu"}, Metadata: []byte(`{"trace":"t1"}`),
		Concurrency: byCustomer, Unique: &baton.UniqueOpts{Scope: baton.UniqueRunning},
	})
	var events []*baton.JobEvent
	cfg := &baton.Config{OnJobEnd: func(ev *baton.JobEvent) { events = append(events, ev) }}
	w := baton.WorkFunc[webhookArgs](func(context.Context, *baton.Job[webhookArgs]) error { return nil })
	res := workJob(t, ctx, w, row, &batontest.WorkOpts{Config: cfg})

	job := res.Job
	require.Equal(t, row.ID, job.ID)
	require.Equal(t, "hooks", job.Queue)
	require.Equal(t, baton.JobStateRunning, job.State)
	require.Equal(t, 1, job.Attempt)
	require.Equal(t, 7, job.MaxAttempts)
	require.Equal(t, 2, job.Priority)
	require.Equal(t, []string{"eu"}, job.Tags)
	require.JSONEq(t, `{"trace":"t1"}`, string(job.Metadata))
	require.Equal(t, "customer:acme", job.Key)
	require.Equal(t, 2, job.Limit)
	require.Positive(t, job.Fence)
	require.Equal(t, row.Unique, job.Unique)
	require.Equal(t, baton.UniqueRunning, job.UniqueScope)
	require.Equal(t, string(row.Args), string(job.JobRow.Args), "the args as stored")
	require.Equal(t, webhookArgs{Customer: "acme"}, job.Args)

	require.NoError(t, res.Err)
	require.Equal(t, baton.JobOutcomeCompleted, res.Outcome)
	require.Equal(t, row.ID, res.Recorded.ID)
	require.Equal(t, baton.JobStateCompleted, res.Recorded.State)
	require.Len(t, events, 1)
	require.Equal(t, row.ID, events[0].ID)

	stored, err := c.JobGet(ctx, "hooks", row.ID)
	require.NoError(t, err)
	require.Equal(t, baton.JobStateAvailable, stored.State, "the job's own backend is left as it was")
	require.Zero(t, stored.Attempt)
}

// A stored job runs the attempt a worker runs next, after the failed ones
// its row records, and after its runs (JobAgain): their errors are the
// row's, or made up where the row holds none.
func TestWorkJobLaterAttempt(t *testing.T) {
	t.Parallel()
	row := &baton.JobRow{
		ID: "01JZ0000000000000000000000", Queue: "hooks", Kind: "webhook", State: baton.JobStateScheduled,
		Args:    []byte(`{"customer":"acme","unknown":true}`),
		Attempt: 2, MaxAttempts: 3, Runs: 1,
		Errors: []baton.AttemptError{{Attempt: 2, Error: "503 from the endpoint"}},
	}
	w := baton.WorkFunc[webhookArgs](func(context.Context, *baton.Job[webhookArgs]) error { return errors.New("still down") })
	res := workJob(t, t.Context(), w, row, &batontest.WorkOpts{Worker: &baton.WorkerOpts{Backoff: func(n int) time.Duration { return time.Duration(n) * time.Minute }}})
	job := res.Job
	require.Equal(t, 3, job.Attempt)
	require.Equal(t, 1, job.Runs)
	require.Equal(t, "acme", job.Args.Customer)
	require.Len(t, job.Errors, 2)
	require.Equal(t, baton.AttemptError{Attempt: 1, Error: "batontest: attempt 1 failed"}, baton.AttemptError{Attempt: job.Errors[0].Attempt, Error: job.Errors[0].Error})
	require.Equal(t, baton.AttemptError{Attempt: 2, Error: "503 from the endpoint"}, baton.AttemptError{Attempt: job.Errors[1].Attempt, Error: job.Errors[1].Error})
	require.Equal(t, baton.JobOutcomeRetry, res.Outcome)
	require.Equal(t, 3*time.Minute, res.Delay, "the kind's Backoff, of the attempt")
	require.Equal(t, baton.JobStateDead, res.Recorded.State, "its last attempt failed")
	require.Equal(t, row.ID, res.Recorded.ID)
	require.Equal(t, 2, row.Attempt, "row is left as it was")

	// Attempt picks another, even of a job whose attempts are used up.
	row.Attempt = 3
	res = workJob(t, t.Context(), w, row, &batontest.WorkOpts{Attempt: 1})
	require.Equal(t, 1, res.Job.Attempt)
	require.Empty(t, res.Job.Errors)
}

// With no worker given, the kind's registered worker runs, with its
// settings there; the job keeps its own queue.
func TestWorkJobRegisteredKind(t *testing.T) {
	c := setup(t)
	row := insert(t, c, webhookArgs{Customer: "acme"}, &baton.InsertOpts{Queue: "elsewhere"})
	var ran []string
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(_ context.Context, job *baton.Job[webhookArgs]) error {
		ran = append(ran, job.Args.Customer+" in "+job.Queue)
		return errors.New("down")
	}), &baton.WorkerOpts{Queue: "hooks", Backoff: func(int) time.Duration { return time.Hour }})
	res := workJob[webhookArgs](t, t.Context(), nil, row, &batontest.WorkOpts{Config: &baton.Config{Workers: workers}})
	require.Equal(t, []string{"acme in elsewhere"}, ran)
	require.Equal(t, time.Hour, res.Delay)
}

// Stored args that do not decode into T make the job dead, as a worker
// does.
func TestWorkJobUndecodableArgs(t *testing.T) {
	t.Parallel()
	row := &baton.JobRow{ID: "x", Queue: "default", Kind: "webhook", Args: []byte(`{"customer":5}`), MaxAttempts: 25}
	w := baton.WorkFunc[webhookArgs](func(context.Context, *baton.Job[webhookArgs]) error { return nil })
	res := workJob(t, t.Context(), w, row, nil)
	require.ErrorContains(t, res.Err, "cannot be decoded")
	require.Equal(t, baton.JobOutcomeDead, res.Outcome)
	require.Equal(t, "x", res.Job.ID)
}

func TestWorkJobFails(t *testing.T) {
	t.Parallel()
	ran := false
	w := baton.WorkFunc[webhookArgs](func(context.Context, *baton.Job[webhookArgs]) error { ran = true; return nil })
	ok := &baton.JobRow{ID: "j1", Queue: "default", Kind: "webhook", Args: []byte(`{}`), MaxAttempts: 3}
	spent := &baton.JobRow{ID: "j2", Queue: "default", Kind: "webhook", Args: []byte(`{}`), MaxAttempts: 3, Attempt: 3, State: baton.JobStateDead}
	other := &baton.JobRow{ID: "j3", Queue: "default", Kind: "email", Args: []byte(`{}`), MaxAttempts: 3}
	for _, tc := range []struct {
		row  *baton.JobRow
		opts *batontest.WorkOpts
		want string
	}{
		{nil, nil, "nil row"},
		{other, nil, `job j3 is of kind "email", not "webhook"`},
		{ok, &batontest.WorkOpts{Insert: &baton.InsertOpts{}}, "WorkOpts.Insert is Work's: job j1 is inserted already"},
		{spent, nil, "job j2 has used its 3 attempts: none runs next"},
		{ok, &batontest.WorkOpts{Attempt: 4}, "Attempt 4 is out of range 1..3"},
		{ok, &batontest.WorkOpts{Worker: &baton.WorkerOpts{MaxAttempts: -1}}, "negative MaxAttempts"},
		{ok, &batontest.WorkOpts{Config: &baton.Config{MaxAttempts: -1}}, "Config.MaxAttempts is negative"},
	} {
		f := run(func(tb testing.TB) { batontest.WorkJob(t.Context(), tb, w, tc.row, tc.opts) })
		requireFatal(t, f, "batontest: WorkJob: ", tc.want)
	}
	require.False(t, ran)

	f := run(func(tb testing.TB) {
		batontest.WorkJob[webhookArgs](t.Context(), tb, nil, ok, &batontest.WorkOpts{Config: &baton.Config{Workers: baton.NewWorkers()}})
	})
	requireFatal(t, f, `batontest: WorkJob: no worker given, and Config.Workers registers none for kind "webhook"`)
}

// workJob runs batontest.WorkJob and requires that it passed.
func workJob[T baton.JobArgs](t *testing.T, ctx context.Context, w baton.Worker[T], row *baton.JobRow, opts *batontest.WorkOpts) *batontest.WorkResult[T] {
	t.Helper()
	var res *batontest.WorkResult[T]
	requirePassed(t, run(func(tb testing.TB) { res = batontest.WorkJob(ctx, tb, w, row, opts) }))
	return res
}
