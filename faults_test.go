package baton_test

import (
	"context"
	"fmt"
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
