package batontest_test

import (
	"context"
	"errors"
	"fmt"
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
		return nil
	})
	var res *batontest.WorkResult[webhookArgs]
	f := run(func(tb testing.TB) {
		res = batontest.Work(t.Context(), tb, w, webhookArgs{Customer: "acme", Secret: "s3cret"}, &batontest.WorkOpts{
			Worker: &baton.WorkerOpts{Queue: "hooks", Concurrency: byCustomer, MaxAttempts: 5},
			Insert: &baton.InsertOpts{Priority: 4, Tags: []string{"eu"}, Delay: time.Hour},
		})
	})
	requirePassed(t, f)
	require.Same(t, seen, res.Job)
	require.NoError(t, res.Err)
	require.Equal(t, baton.JobOutcomeCompleted, res.Outcome)
	require.Zero(t, res.Delay)

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
}

// Each return is read as a worker reads it (baton.OutcomeOf).
func TestWorkOutcomes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err     error
		outcome baton.JobOutcome
		delay   time.Duration
	}{
		{nil, baton.JobOutcomeCompleted, 0},
		{baton.JobSnooze(time.Minute), baton.JobOutcomeSnooze, time.Minute},
		{baton.JobAgainIn(time.Second), baton.JobOutcomeAgain, time.Second},
		{baton.JobCancel(errors.New("bad input")), baton.JobOutcomeCancel, 0},
		{fmt.Errorf("wrapped: %w", baton.JobAgain()), baton.JobOutcomeAgain, 0},
		{errors.New("upstream timeout"), baton.JobOutcomeRetry, 0},
	} {
		w := baton.WorkFunc[syncArgs](func(context.Context, *baton.Job[syncArgs]) error { return tc.err })
		var res *batontest.WorkResult[syncArgs]
		f := run(func(tb testing.TB) { res = batontest.Work(t.Context(), tb, w, syncArgs{UserID: 1}, nil) })
		requirePassed(t, f)
		require.Equal(t, tc.err, res.Err)
		require.Equal(t, tc.outcome, res.Outcome, "%v", tc.err)
		require.Equal(t, tc.delay, res.Delay, "%v", tc.err)
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

// The kind's Timeout ends the handler's context.
func TestWorkTimeout(t *testing.T) {
	t.Parallel()
	w := baton.WorkFunc[syncArgs](func(ctx context.Context, _ *baton.Job[syncArgs]) error {
		<-ctx.Done()
		return ctx.Err()
	})
	var res *batontest.WorkResult[syncArgs]
	f := run(func(tb testing.TB) {
		res = batontest.Work(t.Context(), tb, w, syncArgs{}, &batontest.WorkOpts{Worker: &baton.WorkerOpts{Timeout: 10 * time.Millisecond}})
	})
	requirePassed(t, f)
	require.ErrorIs(t, res.Err, context.DeadlineExceeded)
	require.Equal(t, baton.JobOutcomeRetry, res.Outcome)
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
	} {
		f := run(func(tb testing.TB) { batontest.Work(t.Context(), tb, w, syncArgs{}, tc.opts) })
		requireFatal(t, f, "batontest: Work: ", tc.want)
	}
	require.False(t, ran)
}
