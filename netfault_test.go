package baton_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/faultproxy"
	"github.com/batonhq/baton/internal/keycheck"
	"github.com/batonhq/baton/internal/lockcheck"
	"github.com/batonhq/baton/internal/redistest"
)

// The network fault test: three worker clients, each on its own
// connections through its own fault proxy, run keyed jobs of the keyed
// crash test's keys (limits 1 and 3) while a chaos loop cuts one client's
// connections or partitions it for up to 300ms, every few tens of
// milliseconds. A cut loses the replies of the calls in flight: a finish
// is sent again, and the jobs a lost fetch or finish leased are given back
// by the client's next call (batonredis, leaserecords.go), so no attempt is
// counted for a job that did not run. Partitions are shorter than a
// heartbeat's slack, so few live handlers lose their leases. Afterwards
// every job is completed and none dead, the history keeps every key's limit
// and fence order (internal/keycheck), no key has holders or parked jobs
// left, and every job has as many attempts counted as it had executions.
// BATON_NETFAULT_JOBS sets the number of jobs (default 2,000; make chaos
// runs 20,000).
func TestNetworkFaultsKeepLimits(t *testing.T) {
	t.Parallel()
	jobs := 2000
	if v := os.Getenv("BATON_NETFAULT_JOBS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "BATON_NETFAULT_JOBS")
		jobs = n
	}
	srv := redistest.StartT(t, nil)
	admin, prefix := keyedCrashClient(t, srv.Addr(), []string{"default"})
	ctx := context.Background()
	byKey := &baton.ConcurrencyOpts{Key: baton.KeyOf(func(a keyedCrashArgs) string { return a.Key }), Limit: 1}

	var (
		mu    sync.Mutex
		execs []*keycheck.Execution
		lost  int
	)
	handler := func(ctx context.Context, job *baton.Job[keyedCrashArgs]) error {
		e := &keycheck.Execution{Job: job.ID, Key: job.Key, Fence: job.Fence, Start: lockcheck.Now()}
		mu.Lock()
		execs = append(execs, e)
		mu.Unlock()
		select {
		case <-time.After(time.Duration(2+rand.IntN(8)) * time.Millisecond):
		case <-ctx.Done():
		}
		mu.Lock()
		e.End = lockcheck.Now()
		if errors.Is(context.Cause(ctx), baton.ErrLeaseLost) {
			e.Lost = true
			lost++
		}
		mu.Unlock()
		return nil
	}
	proxies := make([]*faultproxy.Proxy, 3)
	for i := range proxies {
		proxies[i] = faultproxy.StartT(t, srv.Addr())
		workers := baton.NewWorkers()
		baton.AddWorker(workers, baton.WorkFunc[keyedCrashArgs](handler), &baton.WorkerOpts{Concurrency: byKey})
		cfg := &baton.Config{Workers: workers, Concurrency: 8, LeaseTTL: 2 * time.Second,
			PollInterval: 200 * time.Millisecond, Logger: quiet}
		if i == 2 {
			cfg.Queues = []baton.QueueConfig{{Name: "default"}, {Name: "other"}}
		}
		c, err := baton.NewClient(redisDriver(t, proxies[i].Addr(), prefix), cfg)
		require.NoError(t, err)
		start(t, c)
		t.Cleanup(proxies[i].Heal) // before the client stops
	}

	var batch []*baton.InsertManyParams
	for i := range jobs {
		batch = append(batch, &baton.InsertManyParams{
			Args: keyedCrashArgs{Key: fmt.Sprintf("k%02d", rand.IntN(len(keyedCrashKeys))), N: i},
			Opts: &baton.InsertOpts{MaxAttempts: 1000, Concurrency: byKey},
		})
	}
	res, err := admin.InsertMany(ctx, batch)
	require.NoError(t, err)

	// The chaos loop, until every job is completed.
	stop := make(chan struct{})
	var cuts, partitions int
	chaosDone := make(chan struct{})
	go func() {
		defer close(chaosDone)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(20+rand.IntN(60)) * time.Millisecond):
			}
			px := proxies[rand.IntN(len(proxies))]
			if rand.IntN(2) == 0 {
				px.Cut()
				cuts++
				continue
			}
			px.Partition()
			partitions++
			select {
			case <-stop:
			case <-time.After(time.Duration(50+rand.IntN(250)) * time.Millisecond):
			}
			px.Heal()
		}
	}()
	limit := time.Minute + time.Duration(jobs/100)*time.Second
	ok := func() bool {
		ok := false
		require.Eventually(t, func() bool { ok = completed(t, admin, jobs)(); return ok }, limit, 50*time.Millisecond)
		return ok
	}()
	close(stop)
	<-chaosDone
	require.True(t, ok)

	stats, err := admin.QueueStats(ctx, "default")
	require.NoError(t, err)
	require.Zero(t, stats.Counts[baton.JobStateDead])
	attempts := map[string]int{}
	for _, r := range res {
		row, err := admin.JobGet(ctx, "default", r.Job.ID)
		require.NoError(t, err)
		attempts[r.Job.ID] = row.Attempt
	}
	var busy []string
	require.Eventually(t, func() bool {
		keys, _, err := admin.KeyList(ctx, "default", nil)
		busy = busy[:0]
		for _, k := range keys {
			if k.Holding+k.Parked+k.Chained > 0 {
				busy = append(busy, fmt.Sprintf("%s: %d holding, %d parked, %d chained", k.Key, k.Holding, k.Parked, k.Chained))
			}
		}
		return err == nil && len(busy) == 0
	}, 5*time.Second, 10*time.Millisecond, "keys still held: %v", busy)

	mu.Lock()
	defer mu.Unlock()
	ran := map[string]int{}
	history := make([]keycheck.Execution, len(execs))
	for i, e := range execs {
		ran[e.Job]++
		history[i] = *e
	}
	require.Len(t, ran, jobs, "every job ran")
	require.NoError(t, keycheck.Check(history, keyedCrashKeys))
	// An attempt counted for no execution was leased to nobody; an
	// execution beyond its job's attempts had its attempt given back,
	// though it ran (see docs/job-states.md, "At least once", for what
	// can still do that: faults longer than these).
	total, nobody, uncounted := 0, 0, 0
	for id, n := range attempts {
		total += n
		nobody += max(n-ran[id], 0)
		uncounted += max(ran[id]-n, 0)
	}
	require.Zero(t, nobody, "attempts leased to nobody")
	require.Zero(t, uncounted, "executions beyond their job's attempts")
	t.Logf("%d jobs through %d cuts and %d partitions: %d executions (%d leases lost by live handlers), %d attempts (%d leased to nobody, %d executions beyond their job's attempts); no key over its limit, fences in order",
		jobs, cuts, partitions, len(execs), lost, total, nobody, uncounted)
}
