package baton_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/redistest"
)

// With Redis paused, a running job's lease cannot be renewed: its handler's
// context must end (ErrLeaseLost) before the lease could have expired on
// the server, and once Redis is back the job runs again, its lost attempt
// counted.
func TestLeaseLostWhenRedisPaused(t *testing.T) {
	t.Parallel()
	srv := redistest.StartT(t, nil)
	d := redisDriver(t, srv.Addr(), "")

	const leaseTTL = 600 * time.Millisecond
	type lost struct {
		cause   error
		after   time.Duration // from the handler's start
		attempt int
	}
	lostc := make(chan lost, 1)
	var runs atomic.Int32
	done := make(chan int, 1)
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
		if runs.Add(1) > 1 {
			done <- job.Attempt
			return nil
		}
		began := time.Now()
		<-ctx.Done()
		lostc <- lost{context.Cause(ctx), time.Since(began), job.Attempt}
		return ctx.Err()
	}), nil)
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, LeaseTTL: leaseTTL, PollInterval: 100 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	start(t, c)
	ctx := context.Background()
	_, err = c.Insert(ctx, emailArgs{To: "a"}, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return runs.Load() == 1 }, 5*time.Second, time.Millisecond)

	require.NoError(t, srv.Pause())
	var l lost
	select {
	case l = <-lostc:
	case <-time.After(5 * time.Second):
		_ = srv.Resume()
		t.Fatal("the handler's context was not cancelled while Redis was paused")
	}
	require.NoError(t, srv.Resume())
	require.ErrorIs(t, l.cause, baton.ErrLeaseLost)
	// The runner's timer is set to the fetch's send time plus the TTL less
	// a margin, so it fires before the server's expiry; on a loaded two-core
	// machine a timer can fire tens of milliseconds late, hence the slack.
	require.Less(t, l.after, leaseTTL+100*time.Millisecond, "the handler must stop when its lease can no longer be trusted")
	t.Logf("handler stopped %v after it started (lease %v)", l.after, leaseTTL)

	select {
	case attempt := <-done:
		require.Equal(t, 2, attempt, "the lost attempt is counted")
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not run again after Redis came back")
	}
}

// An unreachable Redis makes inserts fail with a clear error; once it is
// back, inserts and workers carry on and no job is lost.
func TestRedisOutageInsertsFailThenRecover(t *testing.T) {
	t.Parallel()
	srv := redistest.StartT(t, nil)
	d := redisDriver(t, srv.Addr(), "")
	var ran atomic.Int32
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
		ran.Add(1)
		return nil
	}), nil)
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, PollInterval: 100 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	start(t, c)
	ctx := context.Background()
	_, err = c.Insert(ctx, emailArgs{To: "before"}, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return ran.Load() == 1 }, 5*time.Second, 5*time.Millisecond)

	require.NoError(t, srv.Kill())
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = c.Insert(ictx, emailArgs{To: "during"}, nil)
	cancel()
	require.ErrorContains(t, err, `baton: insert into "default"`)
	require.NoError(t, srv.Restart())

	var inserted int32
	require.Eventually(t, func() bool {
		ictx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		_, err := c.Insert(ictx, emailArgs{To: fmt.Sprint("after", inserted)}, nil)
		if err == nil {
			inserted++
		}
		return inserted == 3
	}, 10*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool { return ran.Load() == 4 }, 10*time.Second, 10*time.Millisecond, "workers resume after the outage")
}

// Redis stalls longer than a fetch waits for its reply waste no attempt:
// the fetches and finishes that gave up while Redis was paused lease
// nothing when Redis runs them after all. Jobs of one attempt are inserted
// a few at a time while Redis is paused twice; afterwards each dead job is
// one whose handler ran (and lost its lease in a pause), never one leased
// by a call nobody waited for.
func TestRedisStallsWasteNoAttempt(t *testing.T) {
	t.Parallel()
	srv := redistest.StartT(t, nil)
	t.Cleanup(func() { _ = srv.Resume() })
	d := redisDriver(t, srv.Addr(), "")

	const (
		leaseTTL = 1500 * time.Millisecond // the runner waits 1.483s for a call that leases
		pause    = 2 * time.Second
	)
	var started sync.Map // job ID → struct{}
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
		started.Store(job.ID, struct{}{})
		time.Sleep(5 * time.Millisecond)
		return nil
	}), nil)
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 4, LeaseTTL: leaseTTL,
		PollInterval: 50 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	start(t, c)

	// Insert one job every 10ms for 6s; an insert that waits more than
	// 200ms gives up (Redis may still insert it when it resumes).
	inserted := make(chan struct{})
	go func() {
		defer close(inserted)
		for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			_, _ = c.Insert(ctx, emailArgs{To: "x"}, &baton.InsertOpts{MaxAttempts: 1})
			cancel()
		}
	}()
	t0 := time.Now()
	for _, at := range []time.Duration{time.Second, 3500 * time.Millisecond} {
		time.Sleep(time.Until(t0.Add(at)))
		require.NoError(t, srv.Pause())
		time.Sleep(pause)
		require.NoError(t, srv.Resume())
	}
	<-inserted

	ctx := context.Background()
	var stats *baton.QueueStats
	require.Eventually(t, func() bool {
		stats, err = c.QueueStats(ctx, "default")
		require.NoError(t, err)
		n := stats.Counts
		return n[baton.JobStateAvailable]+n[baton.JobStateScheduled]+n[baton.JobStateRunning] == 0
	}, 3*leaseTTL+5*time.Second, 10*time.Millisecond, "jobs left unfinished")
	dead, total, err := c.JobList(ctx, "default", baton.JobStateDead, &baton.JobListOpts{Limit: 1000})
	require.NoError(t, err)
	require.Len(t, dead, total)
	never := 0
	for _, j := range dead {
		if _, ok := started.Load(j.ID); !ok {
			never++
		}
	}
	t.Logf("%d jobs completed, %d dead, of which %d never ran (the others lost their leases in a pause)",
		stats.Counts[baton.JobStateCompleted], len(dead), never)
	require.Positive(t, stats.Counts[baton.JobStateCompleted])
	require.Zero(t, never, "jobs dead without ever running: leased by calls nobody waited for")
}
