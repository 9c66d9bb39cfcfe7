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

// A Redis that crashes (SIGKILL) and restarts from its append-only file
// loses no job and runs none twice because of the crash alone: jobs
// running through the outage keep their leases and complete once, a key's
// limit holds and its fences keep rising, and the backlog runs after the
// restart without restarting the client.
func TestRedisCrashWithAOFLosesNoJob(t *testing.T) {
	t.Parallel()
	srv := redistest.StartT(t, &redistest.Options{Args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
	d := redisDriver(t, srv.Addr(), "")
	gate := make(chan struct{})
	var mu sync.Mutex
	runs := map[string]int{} // handler starts by job ID
	var slowRunning atomic.Int32
	seen := newPerKey()
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
		mu.Lock()
		runs[job.ID]++
		mu.Unlock()
		if job.Args.To != "slow" {
			return nil
		}
		slowRunning.Add(1)
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}), nil)
	baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(ctx context.Context, job *baton.Job[webhookArgs]) error {
		mu.Lock()
		runs[job.ID]++
		mu.Unlock()
		seen.enter(job.Key, job.Fence)
		time.Sleep(5 * time.Millisecond)
		seen.leave(job.Key)
		return nil
	}), &baton.WorkerOpts{Concurrency: byCustomer(1)})
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 8, LeaseTTL: 4 * time.Second,
		PollInterval: 100 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	ctx := context.Background()
	var ids []string
	insert := func(args baton.JobArgs) {
		t.Helper()
		res, err := c.Insert(ctx, args, nil)
		require.NoError(t, err)
		ids = append(ids, res.Job.ID)
	}
	for range 3 {
		insert(emailArgs{To: "slow"})
	}
	start(t, c)
	require.Eventually(t, func() bool { return slowRunning.Load() == 3 }, 5*time.Second, time.Millisecond, "the slow jobs run")
	for i := range 40 {
		insert(emailArgs{To: fmt.Sprint("mail", i)})
		insert(webhookArgs{Customer: "acme", N: i})
	}

	// Crash while the slow jobs run and the rest flows.
	require.NoError(t, srv.Kill())
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, srv.Restart())
	for i := range 20 { // inserts work again, retried while the client reconnects
		require.Eventually(t, func() bool {
			ictx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			res, err := c.Insert(ictx, webhookArgs{Customer: "acme", N: 100 + i}, nil)
			if err == nil {
				ids = append(ids, res.Job.ID)
			}
			return err == nil
		}, 10*time.Second, 20*time.Millisecond)
	}
	close(gate)

	require.Eventually(t, func() bool {
		st, err := c.QueueStats(ctx, "default")
		return err == nil && st.Counts[baton.JobStateCompleted] == len(ids)
	}, 20*time.Second, 10*time.Millisecond, "every job completes")
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		require.Equal(t, 1, runs[id], "job %s: handler starts", id)
	}
	require.Len(t, runs, len(ids), "no job the test did not insert")
	seen.mu.Lock()
	defer seen.mu.Unlock()
	require.Equal(t, 1, seen.most["customer:acme"], "the key's limit held")
	fences := seen.fences["customer:acme"]
	require.Len(t, fences, 60)
	for i := 1; i < len(fences); i++ {
		require.Greater(t, fences[i], fences[i-1], "fences rise across the crash")
	}
	t.Logf("%d jobs, each run once through a crash and an AOF restart", len(ids))
}
