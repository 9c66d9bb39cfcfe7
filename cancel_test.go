package baton_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
)

// cancelClient returns a started client whose webhookArgs handler, limited
// to one per customer, reports each job it starts on started and then
// runs body; heartbeats every 20ms, so that a cancel reaches the handler
// soon even without its notice. Every job's end goes to ended.
func cancelClient(t *testing.T, body func(ctx context.Context, job *baton.Job[webhookArgs]) error) (c *baton.Client, started <-chan string, ended <-chan *baton.JobEvent) {
	t.Helper()
	return cancelClientBeating(t, 20*time.Millisecond, body)
}

// cancelClientBeating is cancelClient with heartbeats every beat.
func cancelClientBeating(t *testing.T, beat time.Duration, body func(ctx context.Context, job *baton.Job[webhookArgs]) error) (c *baton.Client, started <-chan string, ended <-chan *baton.JobEvent) {
	t.Helper()
	starts := make(chan string, 10)
	ends := make(chan *baton.JobEvent, 10)
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(ctx context.Context, job *baton.Job[webhookArgs]) error {
		starts <- job.ID
		return body(ctx, job)
	}), &baton.WorkerOpts{Concurrency: byCustomer(1), MaxAttempts: 5})
	c, _ = setup(t, nil, &baton.Config{Workers: workers, LeaseTTL: max(2*time.Second, 3*beat), HeartbeatInterval: beat,
		OnJobEnd: func(ev *baton.JobEvent) { ends <- ev }})
	start(t, c)
	return c, starts, ends
}

// recv receives from ch, boundedly.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		require.FailNow(t, what+": nothing within 5s")
		var zero T
		return zero
	}
}

// A running job cancelled from the admin API: its worker learns of it at
// the next heartbeat and cancels the handler's context with the cause
// ErrJobCancelled; the handler's error then ends the job cancelled, not
// retried though it has attempts left, and the job chained behind it (its
// key's next job) runs.
func TestJobCancelRunningJob(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		var mu sync.Mutex
		causes := map[string]error{}
		c, started, ended := cancelClient(t, func(ctx context.Context, job *baton.Job[webhookArgs]) error {
			if job.Args.N > 0 {
				return nil
			}
			<-ctx.Done()
			mu.Lock()
			causes[job.ID] = context.Cause(ctx)
			mu.Unlock()
			return ctx.Err()
		})
		ctx := t.Context()
		first, err := c.Insert(ctx, webhookArgs{Customer: "acme"}, nil)
		require.NoError(t, err)
		next, err := c.Insert(ctx, webhookArgs{Customer: "acme", N: 1}, nil)
		require.NoError(t, err)
		require.Equal(t, first.Job.ID, recv(t, started, "the first job's start"))

		row, err := c.JobCancel(ctx, "default", first.Job.ID)
		require.NoError(t, err)
		require.Equal(t, baton.JobStateRunning, row.State, "a running job is asked to stop")
		require.False(t, row.CancelRequestedAt.IsZero())

		ev := recv(t, ended, "the cancelled job's end")
		require.Equal(t, first.Job.ID, ev.ID)
		require.Equal(t, baton.JobOutcomeCancel, ev.Outcome)
		mu.Lock()
		require.ErrorIs(t, causes[first.Job.ID], baton.ErrJobCancelled, "the handler's context's cause")
		mu.Unlock()
		got := waitState(t, c, "default", first.Job.ID, baton.JobStateCancelled)
		require.Equal(t, 1, got.Attempt, "not retried")
		require.Len(t, got.Errors, 1)
		require.Equal(t, "cancelled by the admin API", got.Errors[0].Error)
		require.True(t, got.CancelRequestedAt.IsZero())

		require.Equal(t, next.Job.ID, recv(t, started, "the key's next job's start"))
		waitState(t, c, "default", next.Job.ID, baton.JobStateCompleted)
		_, err = c.JobCancel(ctx, "default", next.Job.ID)
		require.ErrorContains(t, err, "is completed")
	})
}

// A handler that returns nil once cancelled completed its work: the job
// completes, the request left on it to show.
func TestJobCancelHandlerReturningNilCompletes(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		c, started, _ := cancelClient(t, func(ctx context.Context, job *baton.Job[webhookArgs]) error {
			<-ctx.Done()
			return nil
		})
		ctx := t.Context()
		res, err := c.Insert(ctx, webhookArgs{Customer: "acme"}, nil)
		require.NoError(t, err)
		recv(t, started, "the job's start")
		_, err = c.JobCancel(ctx, "default", res.Job.ID)
		require.NoError(t, err)
		got := waitState(t, c, "default", res.Job.ID, baton.JobStateCompleted)
		require.False(t, got.CancelRequestedAt.IsZero())
	})
}

// A job cancelled before it runs never runs; its parked successor takes
// its slot at once; an unknown job and a bad queue are errors.
func TestJobCancelQueuedJob(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		c, _ := setup(t, nil, &baton.Config{AllowUnknownKinds: true})
		ctx := t.Context()
		opts := &baton.InsertOpts{Concurrency: byCustomer(1)}
		first, err := c.Insert(ctx, webhookArgs{Customer: "acme"}, opts)
		require.NoError(t, err)
		second, err := c.Insert(ctx, webhookArgs{Customer: "acme"}, opts)
		require.NoError(t, err)
		require.Equal(t, baton.JobStateParked, second.Job.State)

		row, err := c.JobCancel(ctx, "default", first.Job.ID)
		require.NoError(t, err)
		require.Equal(t, baton.JobStateCancelled, row.State)
		require.Equal(t, "cancelled by the admin API", row.Errors[0].Error)
		got, err := c.JobGet(ctx, "default", second.Job.ID)
		require.NoError(t, err)
		require.Equal(t, baton.JobStateAvailable, got.State, "promoted in the same step")

		_, err = c.JobCancel(ctx, "default", "01ARZ3NDEKTSV4RRFFQ69G5FAV")
		require.ErrorIs(t, err, baton.ErrJobNotFound)
		_, err = c.JobCancel(ctx, "no queue", first.Job.ID)
		require.ErrorContains(t, err, "not allowed")
		_, err = c.JobCancel(ctx, "default", first.Job.ID)
		require.ErrorIs(t, err, batondriver.ErrBadParams, "a cancelled job is refused")
		require.ErrorContains(t, err, "is cancelled")
		require.False(t, baton.JobCancellable(baton.JobStateCancelled))
		require.True(t, baton.JobCancellable(baton.JobStateRunning))
	})
}

// A cancel reaches a running handler through the queue's notices, long
// before the heartbeat would report it; a job chained behind another and
// cancelled before it started never runs, and ends cancelled.
func TestJobCancelReachesHandlerAtOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		release := make(chan struct{})
		c, started, _ := cancelClientBeating(t, time.Minute, func(ctx context.Context, job *baton.Job[webhookArgs]) error {
			if job.Args.N == 1 {
				<-ctx.Done()
				return ctx.Err()
			}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		ctx := t.Context()
		// In one call, so that the fetch that leases the first job chains
		// the second behind it; the third waits.
		ids := insertBacklog(t, c, "acme", 3)
		require.Equal(t, ids[0], recv(t, started, "the first job's start"))
		require.Eventually(t, func() bool {
			info, err := c.KeyGet(ctx, "default", "customer:acme")
			return err == nil && info.Chained == 1
		}, 5*time.Second, time.Millisecond, "the second job chained behind the first")
		// Chained, not started: given back, and ended.
		_, err := c.JobCancel(ctx, "default", ids[1])
		require.NoError(t, err)
		waitState(t, c, "default", ids[1], baton.JobStateCancelled)
		// Running: its handler stops at once, not at the next heartbeat
		// a minute away.
		asked := time.Now()
		_, err = c.JobCancel(ctx, "default", ids[0])
		require.NoError(t, err)
		waitState(t, c, "default", ids[0], baton.JobStateCancelled)
		require.Less(t, time.Since(asked), 2*time.Second)
		close(release)
		require.Equal(t, ids[2], recv(t, started, "the key's third job's start"))
		waitState(t, c, "default", ids[2], baton.JobStateCompleted)
	})
}

// A cancel heard while the call that leased the job is still out stops
// the job as the reply comes: it does not run, and ends cancelled, without
// waiting for a heartbeat; the job chained behind it runs next.
func TestJobCancelHeardWhileLeaseInFlight(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		t.Parallel()
		d := &heldReplies{tappedNotices: tapNotices(newJobDriver(t)), held: make(chan struct{}, 1), release: make(chan struct{})}
		d.armed.Store(true)
		c, began, gate, ids := gatedClient(t, d)
		defer close(gate)
		ctx := t.Context()
		<-d.held // the fetch that leased the first job, and chained the second
		asked := time.Now()
		_, err := c.JobCancel(ctx, "default", ids[0])
		require.NoError(t, err)
		require.Equal(t, ids[0], recv(t, d.forwarded, "the cancel notice").Cancel)
		d.inject(batondriver.QueueNotice{Key: "nobody"}) // the client has acted on the cancel
		close(d.release)
		require.Equal(t, 1, recv(t, began, "the chained job's start"), "the cancelled job ran")
		waitState(t, c, "default", ids[0], baton.JobStateCancelled)
		require.Less(t, time.Since(asked), 2*time.Second, "the cancel waited for a heartbeat")
	})
}

// tapOneQueue taps the notices of one queue only (tappedNotices hands
// every queue's listener the same channel), and fails that queue's
// finishes while failing is set: its backend node is down.
type tapOneQueue struct {
	*heldReplies
	queue   string
	failing atomic.Bool
}

func (d *tapOneQueue) QueueListen(ctx context.Context, p *batondriver.QueueParams) (batondriver.QueueListener, error) {
	if p.Queue != d.queue {
		return d.tappedNotices.JobDriver.QueueListen(ctx, p)
	}
	return d.heldReplies.QueueListen(ctx, p)
}

func (d *tapOneQueue) JobFinish(ctx context.Context, p *batondriver.JobFinishParams) (*batondriver.JobFinishResult, error) {
	if p.Queue == d.queue && d.failing.Load() {
		return nil, errors.New("node down")
	}
	return d.heldReplies.JobFinish(ctx, p)
}

// A job a fetch brings whose cancel was heard while the fetch was out goes
// back from a call of its own: while that call fails and retries (the
// queue's node is down), the dispatcher goes on fetching the other queues.
func TestJobCancelHeardInFetchHoldsNoOtherQueue(t *testing.T) {
	t.Parallel()
	d := &tapOneQueue{queue: "a",
		heldReplies: &heldReplies{tappedNotices: tapNotices(newJobDriver(t)), held: make(chan struct{}, 1), release: make(chan struct{})}}
	d.armed.Store(true)
	started := make(chan string, 10)
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(ctx context.Context, job *baton.Job[webhookArgs]) error {
		started <- job.ID
		return nil
	}), nil)
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 2, Logger: quiet, PollInterval: 5 * time.Second,
		Queues: []baton.QueueConfig{{Name: "a"}, {Name: "b"}}})
	require.NoError(t, err)
	ctx := t.Context()
	j, err := c.Insert(ctx, webhookArgs{Customer: "x"}, &baton.InsertOpts{Queue: "a"})
	require.NoError(t, err)
	start(t, c)
	t.Cleanup(func() { d.failing.Store(false) }) // before Stop
	<-d.held
	_, err = c.JobCancel(ctx, "a", j.Job.ID)
	require.NoError(t, err)
	require.Equal(t, j.Job.ID, recv(t, d.forwarded, "the cancel notice").Cancel)
	d.inject(batondriver.QueueNotice{Key: "nobody"}) // the client has acted on the cancel
	d.failing.Store(true)
	close(d.release)
	k, err := c.Insert(ctx, webhookArgs{Customer: "y"}, &baton.InsertOpts{Queue: "b"})
	require.NoError(t, err)
	select {
	case id := <-started:
		require.Equal(t, k.Job.ID, id, "the cancelled job ran")
	case <-time.After(2 * time.Second):
		t.Fatal("queue b's job waited for queue a's give-back to be recorded")
	}
	d.failing.Store(false)
	waitState(t, c, "a", j.Job.ID, baton.JobStateCancelled)
}
