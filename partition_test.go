package baton_test

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver/batonredis"
	"github.com/batonhq/baton/internal/faultproxy"
	"github.com/batonhq/baton/internal/redistest"
)

// A worker process cut off from Redis by a network partition (a proxy that
// holds its traffic) while it runs a keyed job, with the key's next job
// chained behind it: its handler's context ends (ErrLeaseLost) before the
// lease expires, so the key's next holder, on another process, starts only
// after the partitioned one stopped, with a higher fence; the chained job
// runs once, on the other process, and the first job runs again after it;
// and once
// the partition heals, the calls the partitioned process sent meanwhile
// (heartbeats, fetches) reach Redis late and change nothing, and that
// process works on as before.
func TestPartitionedHolderStopsBeforeItsSuccessor(t *testing.T) {
	t.Parallel()
	srv := redistest.StartT(t, nil)
	px := faultproxy.StartT(t, srv.Addr())

	const leaseTTL = 600 * time.Millisecond
	type run struct {
		worker  string
		n       int
		attempt int
		fence   int64
		start   time.Time
		end     time.Time
		err     error
	}
	var (
		mu   sync.Mutex
		runs []run
	)
	started := make(chan run, 16)
	newWorker := func(name, addr string, recoverDelay time.Duration) *baton.Client {
		workers := baton.NewWorkers()
		baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(ctx context.Context, job *baton.Job[webhookArgs]) error {
			r := run{worker: name, n: job.Args.N, attempt: job.Attempt, fence: job.Fence, start: time.Now()}
			started <- r
			if job.Args.N == 1 && job.Attempt == 1 {
				<-ctx.Done() // the partitioned holder: runs until its lease cannot be trusted
				r.err = context.Cause(ctx)
			} else {
				time.Sleep(10 * time.Millisecond)
			}
			r.end = time.Now()
			mu.Lock()
			runs = append(runs, r)
			mu.Unlock()
			return r.err
		}), &baton.WorkerOpts{Concurrency: byCustomer(1)})
		c, err := baton.NewClient(redisDriver(t, addr, ""), &baton.Config{Workers: workers, Concurrency: 4,
			LeaseTTL: leaseTTL, RecoverDelay: recoverDelay, PollInterval: 50 * time.Millisecond, Logger: quiet})
		require.NoError(t, err)
		start(t, c)
		return c
	}
	next := func(what string) run {
		t.Helper()
		select {
		case r := <-started:
			return r
		case <-time.After(10 * time.Second):
			t.Fatalf("no handler started: %s", what)
			return run{}
		}
	}

	// Process a, through the proxy, takes job 1 and chains job 2 behind it.
	a := newWorker("a", px.Addr(), 0)
	t.Cleanup(px.Heal) // runs before a stops: the proxy must not hold a's last calls
	ctx := context.Background()
	res, err := a.InsertMany(ctx, []*baton.InsertManyParams{
		{Args: webhookArgs{Customer: "p", N: 1}}, {Args: webhookArgs{Customer: "p", N: 2}}})
	require.NoError(t, err)
	id1, id2 := res[0].Job.ID, res[1].Job.ID
	r := next("job 1 on a")
	require.Equal(t, "a", r.worker)
	require.Equal(t, 1, r.n)
	info, err := a.KeyGet(ctx, "default", "customer:p")
	require.NoError(t, err)
	require.Equal(t, 1, info.Chained, "job 2 is chained behind job 1 on a")

	// Process b, straight to Redis, starts now: nothing is left for it. Its
	// RecoverDelay is the slack for a's timer, which a loaded machine may
	// fire late.
	b := newWorker("b", srv.Addr(), 200*time.Millisecond)
	px.Partition()
	// When job 1's lease expires, job 2 goes back to the head of the key's
	// parked jobs and takes the freed slot; job 1 comes back behind it.
	r = next("job 2, on b")
	require.Equal(t, "b", r.worker)
	require.Equal(t, 2, r.n)
	require.Equal(t, 1, r.attempt, "a chained job given back does not count an attempt")
	r = next("job 1 again, on b")
	require.Equal(t, "b", r.worker)
	require.Equal(t, 1, r.n)
	require.Equal(t, 2, r.attempt, "a's lost attempt counts")
	waitState(t, b, "default", id1, baton.JobStateCompleted)

	// The partition heals: a's late calls reach Redis first, on its
	// connection, then a works on. With b stopped, a must run job 3.
	px.Heal()
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	require.NoError(t, b.Stop(stopCtx))
	cancel()
	_, err = a.Insert(ctx, webhookArgs{Customer: "p", N: 3}, nil)
	require.NoError(t, err)
	r = next("job 3, on a after the partition")
	require.Equal(t, "a", r.worker)
	require.Equal(t, 3, r.n)

	for id, attempt := range map[string]int{id1: 2, id2: 1} {
		row := waitState(t, a, "default", id, baton.JobStateCompleted)
		require.Equal(t, attempt, row.Attempt, "job %s: a's late calls changed nothing", id)
	}
	require.Eventually(t, func() bool {
		_, err := a.KeyGet(ctx, "default", "customer:p")
		return errors.Is(err, baton.ErrKeyNotFound)
	}, 5*time.Second, 10*time.Millisecond, "the key is idle (it keeps nothing): no slot leaked")

	// The key's history: fences rise and no two runs overlap, but for the
	// slack a's lost run has: a stops trusting its lease a little before the
	// server's expiry (1% of LeaseTTL + 2ms), and its timer and handler may
	// be late by more than that on a loaded machine, as they may be in any
	// process; fences are what protect the systems the jobs write to.
	const slack = 100 * time.Millisecond
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, runs, 4, "job 1 twice (a lost, b), job 2 once, job 3 once")
	sort.Slice(runs, func(i, j int) bool { return runs[i].start.Before(runs[j].start) })
	lost := runs[0]
	require.Equal(t, "a", lost.worker)
	require.ErrorIs(t, lost.err, baton.ErrLeaseLost)
	// Its handler's return, seen here, may come later still than its
	// timer on a loaded machine (122ms over the lease once, with other
	// test suites running): bounded, but not by the overlap slack.
	require.Less(t, lost.end.Sub(lost.start), leaseTTL+3*slack, "a stops when its lease can no longer be trusted")
	for i := 1; i < len(runs); i++ {
		require.Greater(t, runs[i].fence, runs[i-1].fence, "fences rise")
		prevEnd := runs[i-1].end
		if i == 1 {
			prevEnd = prevEnd.Add(-slack)
		}
		require.False(t, runs[i].start.Before(prevEnd), "run %d (%s, job %d) started %v before run %d (%s, job %d) ended",
			i, runs[i].worker, runs[i].n, runs[i-1].end.Sub(runs[i].start), i-1, runs[i-1].worker, runs[i-1].n)
	}
	t.Logf("a stopped %v after its start; b started %v after that",
		lost.end.Sub(lost.start), runs[1].start.Sub(lost.end))
}

// An insert whose caller gave up during a partition may still be stored:
// the server runs it when the partition heals. Retried with a unique key,
// it returns the stored job as a duplicate and stores nothing more
// (docs/job-states.md, "At least once").
func TestInsertRetriedAfterPartitionWithUniqueKey(t *testing.T) {
	t.Parallel()
	srv := redistest.StartT(t, nil)
	px := faultproxy.StartT(t, srv.Addr())
	prefix := "ins" + t.Name()
	// One connection (rueidis opens up to four, lazily): a connection opened
	// during the partition would never have sent the insert.
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{px.Addr()}, PipelineMultiplex: -1})
	require.NoError(t, err)
	t.Cleanup(rc.Close)
	d, err := batonredis.New(rc, &batonredis.Config{Prefix: prefix})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	c, err := baton.NewClient(d, &baton.Config{AllowUnknownKinds: true, Logger: quiet})
	require.NoError(t, err)
	admin, err := baton.NewClient(redisDriver(t, srv.Addr(), prefix), &baton.Config{AllowUnknownKinds: true, Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(px.Heal) // before the clients close
	ctx := context.Background()
	opts := &baton.InsertOpts{Unique: &baton.UniqueOpts{}} // the kind and args; until done; return the twin
	available := func() int {
		stats, err := admin.QueueStats(ctx, "default")
		require.NoError(t, err)
		return stats.Counts[baton.JobStateAvailable]
	}
	// An insert before the partition opens the connection.
	_, err = c.Insert(ctx, emailArgs{To: "before"}, nil)
	require.NoError(t, err)
	require.Equal(t, 1, available())

	px.Partition()
	ictx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = c.Insert(ictx, emailArgs{To: "once"}, opts)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, 1, available())
	px.Heal()
	require.Eventually(t, func() bool { return available() == 2 }, 5*time.Second, 10*time.Millisecond,
		"the insert whose caller gave up was stored after all")

	res, err := c.Insert(ctx, emailArgs{To: "once"}, opts)
	require.NoError(t, err)
	require.Equal(t, baton.JobDuplicate, res.Status)
	require.Equal(t, 2, available(), "the retry stored nothing")
}
