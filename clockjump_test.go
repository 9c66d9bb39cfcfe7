package baton_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/internal/redistest"
)

// The tests in this file step the Redis server's real-time clock
// (redistest.StartWithClock), which Redis expires keys by and Baton's
// scripts read with TIME, and check what jobs do then. The workers' own
// clocks do not move.

// jumpRun is one start of a handler.
type jumpRun struct {
	worker  string
	n       int
	attempt int
	fence   int64
	at      time.Time
}

// nextRun returns the next handler start, or fails the test after 10s.
func nextRun(t *testing.T, starts <-chan jumpRun, what string) jumpRun {
	t.Helper()
	select {
	case r := <-starts:
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("no handler started: %s", what)
		return jumpRun{}
	}
}

// A forward jump of the server's clock past a running keyed job's lease
// frees it on the server: another worker takes the job back and runs it
// again, with a higher fence, while the first run still runs, and the
// key's limit of 1 counts only the live lease (docs/job-states.md). The
// first run's handler context ends with ErrLeaseLost at its worker's next
// heartbeat; a first run that returns success before then has its
// outcome found stale, and the job's state stays the second run's. The
// other worker, whose estimate of the server's clock (serverclock.go)
// the jump made wrong, keeps leasing jobs.
//
// Shown to fail on broken variants: with the runner ignoring the leases a
// heartbeat reports lost (runner.extend's "case lost[e.row.ID]" never
// taken), job 1's first run does not end within 3 heartbeat intervals;
// with job_finish.lua taking an outcome of any running job (its lease and
// lease_until not compared), a's late outcome is recorded.
func TestClockJumpForwardRetakesRunningJob(t *testing.T) {
	t.Parallel()
	srv, clock := redistest.StartWithClock(t)
	const leaseTTL, beat = 3 * time.Second, time.Second
	var (
		mu      sync.Mutex
		ended   = map[int]error{} // job N's first run: its context's cause
		endedAt time.Time
	)
	starts := make(chan jumpRun, 16)
	finishA := make(chan struct{}) // job 2's first run returns success
	finishB := make(chan struct{}) // the second runs return
	logs := &logRecords{}
	newWorker := func(name string, concurrency int, log *slog.Logger) *baton.Client {
		workers := baton.NewWorkers()
		baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(ctx context.Context, job *baton.Job[webhookArgs]) error {
			starts <- jumpRun{name, job.Args.N, job.Attempt, job.Fence, time.Now()}
			switch {
			case name == "b":
				select {
				case <-finishB:
				case <-ctx.Done():
				}
				return nil
			case job.Args.N == 1:
				<-ctx.Done()
				mu.Lock()
				ended[1], endedAt = context.Cause(ctx), time.Now()
				mu.Unlock()
				return ctx.Err()
			default:
				select {
				case <-finishA:
				case <-ctx.Done():
				}
				return nil
			}
		}), &baton.WorkerOpts{Concurrency: byCustomer(1)})
		c, err := baton.NewClient(redisDriver(t, srv.Addr(), "jump"), &baton.Config{Workers: workers, Concurrency: concurrency,
			LeaseTTL: leaseTTL, HeartbeatInterval: beat, PollInterval: 100 * time.Millisecond, Logger: log})
		require.NoError(t, err)
		start(t, c)
		return c
	}
	next := func(what string) jumpRun { t.Helper(); return nextRun(t, starts, what) }
	ctx := context.Background()
	// a has a worker for each job: it takes neither back itself.
	a := newWorker("a", 2, slog.New(logs))
	res, err := a.InsertMany(ctx, []*baton.InsertManyParams{
		{Args: webhookArgs{Customer: "x", N: 1}}, {Args: webhookArgs{Customer: "y", N: 2}}})
	require.NoError(t, err)
	id1, id2 := res[0].Job.ID, res[1].Job.ID
	first := map[int]jumpRun{}
	stores := map[int]*fencedStore{1: {}, 2: {}} // what each job writes to
	for range 2 {
		r := next("the first runs, on a")
		first[r.n] = r
		require.NoError(t, stores[r.n].Write(r.fence, "first run"))
	}
	b := newWorker("b", 4, quiet) // it fetches, and samples the server's clock, before the jump
	time.Sleep(200 * time.Millisecond)

	clock.Jump(t, leaseTTL+time.Second)
	jumped := time.Now()
	for range 2 {
		r := next("the jobs taken back, on b")
		require.Equal(t, "b", r.worker)
		require.Equal(t, 2, r.attempt, "job %d: a's lost attempt counts", r.n)
		require.Greater(t, r.fence, first[r.n].fence, "job %d: the new lease's fence is higher", r.n)
		require.NoError(t, stores[r.n].Write(r.fence, "second run"))
		require.ErrorIs(t, stores[r.n].Write(first[r.n].fence, "first run, late"), errStaleFence, "the first run's late write is refused")
		t.Logf("job %d taken back %v after the jump", r.n, r.at.Sub(jumped).Round(time.Millisecond))
	}
	require.Less(t, time.Since(jumped), beat, "b leases at once after the jump")
	mu.Lock()
	_, over := ended[1]
	mu.Unlock()
	require.False(t, over, "job 1's first run still runs beside its second: two runs of a key of limit 1")
	info, err := b.KeyGet(ctx, "default", "customer:x")
	require.NoError(t, err)
	require.Equal(t, 1, info.Running, "the key's limit counts the live lease only")

	// Job 2's first run returns success before a hears its lease is lost:
	// its outcome is stale.
	close(finishA)
	require.Eventually(t, func() bool {
		return logs.count(slog.LevelWarn, "outcomes of jobs whose leases had been lost were ignored") > 0
	}, 5*time.Second, 5*time.Millisecond, "a's late outcome was not found stale")
	row, err := b.JobGet(ctx, "default", id2)
	require.NoError(t, err)
	require.Equal(t, baton.JobStateRunning, row.State, "a's late outcome overwrote nothing")
	require.Equal(t, 2, row.Attempt)

	// Job 1's first run learns of the loss at a's next heartbeat.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ended[1] != nil
	}, 3*beat, time.Millisecond, "job 1's first run never ended")
	mu.Lock()
	require.ErrorIs(t, ended[1], baton.ErrLeaseLost)
	lost := endedAt.Sub(jumped)
	mu.Unlock()
	t.Logf("job 1's first run ended %v after the jump (heartbeat interval %v)", lost.Round(time.Millisecond), beat)
	require.Less(t, lost, beat+500*time.Millisecond)

	close(finishB)
	for _, id := range []string{id1, id2} {
		row := waitState(t, b, "default", id, baton.JobStateCompleted)
		require.Equal(t, 2, row.Attempt)
	}
}

// A forward jump past a running job's lease lets the worker that runs it
// take it back itself, its fetch finding the lease expired: it runs the
// job again beside the first run, which must end with ErrLeaseLost as
// soon as the process knows the lease is gone, at the latest at its next
// heartbeat, as on another process.
func TestClockJumpForwardRetakenBySameWorker(t *testing.T) {
	t.Parallel()
	srv, clock := redistest.StartWithClock(t)
	const leaseTTL, beat = 3 * time.Second, time.Second
	starts := make(chan jumpRun, 4)
	ended := make(chan error, 4)
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(ctx context.Context, job *baton.Job[webhookArgs]) error {
		starts <- jumpRun{"a", job.Args.N, job.Attempt, job.Fence, time.Now()}
		if job.Attempt > 1 {
			return nil
		}
		<-ctx.Done()
		ended <- context.Cause(ctx)
		return ctx.Err()
	}), &baton.WorkerOpts{Concurrency: byCustomer(1)})
	c, err := baton.NewClient(redisDriver(t, srv.Addr(), "jump"), &baton.Config{Workers: workers, Concurrency: 4,
		LeaseTTL: leaseTTL, HeartbeatInterval: beat, PollInterval: 100 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	start(t, c)
	ctx := context.Background()
	res, err := c.Insert(ctx, webhookArgs{Customer: "x", N: 1}, nil)
	require.NoError(t, err)
	next := func(what string) jumpRun { t.Helper(); return nextRun(t, starts, what) }
	first := next("the first run")
	clock.Jump(t, leaseTTL+time.Second)
	jumped := time.Now()
	second := next("the second run, on the same worker")
	require.Equal(t, 2, second.attempt)
	require.Greater(t, second.fence, first.fence)
	t.Logf("taken back %v after the jump", second.at.Sub(jumped).Round(time.Millisecond))
	waitState(t, c, "default", res.Job.ID, baton.JobStateCompleted)
	select {
	case cause := <-ended:
		require.ErrorIs(t, cause, baton.ErrLeaseLost)
		t.Logf("the first run ended %v after the jump (heartbeat interval %v)", time.Since(jumped).Round(time.Millisecond), beat)
		require.Less(t, time.Since(jumped), beat+500*time.Millisecond, "the first run ends by the next heartbeat")
	case <-time.After(3 * beat):
		t.Fatal("the first run never ended")
	}
}

// fetchCounter counts a driver's fetches.
type fetchCounter struct {
	batondriver.JobDriver
	n atomic.Int64
}

func (d *fetchCounter) JobFetch(ctx context.Context, p *batondriver.JobFetchParams) (*batondriver.JobFetchResult, error) {
	d.n.Add(1)
	return d.JobDriver.JobFetch(ctx, p)
}

// scheduledClient returns a started client on the server at addr that
// sends the time each job starts to ran, and its driver's fetch count.
func scheduledClient(t *testing.T, addr string) (*baton.Client, *fetchCounter, <-chan time.Time) {
	t.Helper()
	ran := make(chan time.Time, 4)
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(ctx context.Context, job *baton.Job[webhookArgs]) error {
		ran <- time.Now()
		return nil
	}), nil)
	d := &fetchCounter{JobDriver: redisDriver(t, addr, "jump")}
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, Logger: quiet}) // PollInterval 1s
	require.NoError(t, err)
	start(t, c)
	return c, d, ran
}

// A job scheduled by the server's clock (InsertOpts.Delay: due when the
// server's clock reaches its RunAt) runs early when that clock jumps
// forward past its RunAt: at once, within the workers' PollInterval, as
// "time from the server" says.
func TestClockJumpForwardRunsScheduledJobEarly(t *testing.T) {
	t.Parallel()
	srv, clock := redistest.StartWithClock(t)
	c, _, ran := scheduledClient(t, srv.Addr())
	_, err := c.Insert(context.Background(), webhookArgs{N: 1}, &baton.InsertOpts{Delay: time.Minute})
	require.NoError(t, err)
	clock.Jump(t, time.Minute)
	jumped := time.Now()
	select {
	case at := <-ran:
		t.Logf("the job scheduled a minute ahead ran %v after the server's clock jumped a minute forward", at.Sub(jumped).Round(time.Millisecond))
		require.Less(t, at.Sub(jumped), time.Second+500*time.Millisecond, "it runs within a PollInterval of the jump")
	case <-time.After(5 * time.Second):
		t.Fatal("the job due by the server's clock did not run")
	}
}

// A job scheduled by the server's clock runs later by a backward jump of
// that clock: when the server's clock reaches its RunAt, not before, and
// then within a PollInterval. Meanwhile the workers, whose own clock
// reaches RunAt first, do not fetch more often than when idle.
func TestClockJumpBackwardDelaysScheduledJob(t *testing.T) {
	t.Parallel()
	srv, clock := redistest.StartWithClock(t)
	c, d, ran := scheduledClient(t, srv.Addr())
	const delay, back = time.Second, 2 * time.Second
	sent := time.Now()
	_, err := c.Insert(context.Background(), webhookArgs{N: 1}, &baton.InsertOpts{Delay: delay})
	require.NoError(t, err)
	clock.Jump(t, -back)
	before := d.n.Load()
	select {
	case at := <-ran:
		fetches := d.n.Load() - before
		took := at.Sub(sent)
		t.Logf("the job delayed %v ran %v after its insert, the server's clock stepped back %v; %d fetches meanwhile", delay, took.Round(time.Millisecond), back, fetches)
		require.GreaterOrEqual(t, took, delay+back-20*time.Millisecond, "it runs when the server's clock reaches its RunAt")
		require.Less(t, took, delay+back+time.Second+500*time.Millisecond)
		require.Less(t, fetches, int64(20), "the workers fetch no more often than at each PollInterval")
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not run")
	}
}

// Periodic ticks are computed on the workers' clocks, and the guard that
// inserts each tick once across processes compares ticks only (the last
// tick inserted, in the queue's meta): jumps of the server's clock, forward
// then backward, neither insert a tick twice nor skip one, and each tick's
// job, due at once by the server's clock whatever it reads, runs soon after
// its tick. Two clients fire the schedule.
//
// Shown to fail on a broken variant: with job_insert.lua's once-guard
// storing the server's clock as the last tick when it is later than the
// tick (HSET of math.max(tick, now)), the ticks after the forward jump are
// refused as already inserted: 4 ticks ran of 8.
func TestClockJumpPeriodicTicks(t *testing.T) {
	t.Parallel()
	srv, clock := redistest.StartWithClock(t)
	const period = 200 * time.Millisecond
	every, err := baton.Every(period)
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		runs  = map[int64]int{}
		worst time.Duration // from a tick to its job's start
	)
	for range 2 {
		workers := baton.NewWorkers()
		baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(ctx context.Context, job *baton.Job[webhookArgs]) error {
			late := time.Since(time.UnixMilli(int64(job.Args.N)))
			mu.Lock()
			defer mu.Unlock()
			runs[int64(job.Args.N)]++
			worst = max(worst, late)
			return nil
		}), nil)
		c, err := baton.NewClient(redisDriver(t, srv.Addr(), "jump"), &baton.Config{Workers: workers, Logger: quiet,
			PeriodicJobs: []*baton.PeriodicJob{{Name: "tick", Schedule: every, Job: func(tick time.Time) (baton.JobArgs, *baton.InsertOpts) {
				return webhookArgs{N: int(tick.UnixMilli())}, nil
			}}}})
		require.NoError(t, err)
		start(t, c)
	}
	began := time.Now()
	time.Sleep(3 * period)
	clock.Jump(t, 5*time.Second)
	time.Sleep(3 * period)
	clock.Jump(t, -10*time.Second)
	time.Sleep(3 * period)
	ended := time.Now()
	time.Sleep(period) // the last tick's job runs

	mu.Lock()
	defer mu.Unlock()
	var ticks []int64
	for tick, n := range runs {
		require.Equal(t, 1, n, "tick %v ran %d times", time.UnixMilli(tick), n)
		ticks = append(ticks, tick)
	}
	slices.Sort(ticks)
	want := 0
	for at := began.Truncate(period).Add(period); at.Before(ended); at = at.Add(period) {
		want++
	}
	t.Logf("%d ticks in %v across a 5s forward and a 10s backward jump; the latest job started %v after its tick",
		len(ticks), ended.Sub(began).Round(time.Millisecond), worst.Round(time.Millisecond))
	require.GreaterOrEqual(t, len(ticks), want-1, "no tick skipped (the first may fall before the clients started)")
	for i := 1; i < len(ticks); i++ {
		require.Equal(t, period, time.Duration(ticks[i]-ticks[i-1])*time.Millisecond, "ticks %d and %d follow each other", i-1, i)
	}
	require.Less(t, worst, time.Second, "each tick's job runs soon after its tick")
}

// Jobs keep running across jumps of the server's clock of each sign: a
// worker kept busy by a backlog (each outcome recorded with the fetch of
// its next job, JobFinish with Fetch) and whose estimate of the server's
// clock (serverclock.go) each jump makes wrong does not stall: the
// forward jump is longer than a fetch's whole wait, so the first fetch
// after it is refused as late, and the refusal replaces the estimate. The
// longest gap between two job starts is logged and bounded.
//
// Shown to fail on a broken variant: with serverClocks.observe keeping a
// queue's first sample for good, every fetch after the forward jump is
// refused and the worker stalls (job 22 of 60 never started).
func TestClockJumpJobsKeepRunning(t *testing.T) {
	t.Parallel()
	srv, clock := redistest.StartWithClock(t)
	const jobs = 60
	starts := make(chan time.Time, jobs)
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(ctx context.Context, job *baton.Job[webhookArgs]) error {
		starts <- time.Now()
		time.Sleep(20 * time.Millisecond)
		return nil
	}), nil)
	c, err := baton.NewClient(redisDriver(t, srv.Addr(), "jump"), &baton.Config{Workers: workers, Concurrency: 1, Logger: quiet})
	require.NoError(t, err)
	params := make([]*baton.InsertManyParams, jobs)
	for i := range params {
		params[i] = &baton.InsertManyParams{Args: webhookArgs{N: i}}
	}
	_, err = c.InsertMany(context.Background(), params)
	require.NoError(t, err)
	start(t, c)
	var last time.Time
	var gaps []time.Duration
	for i := range jobs {
		select {
		case at := <-starts:
			if i > 0 {
				gaps = append(gaps, at.Sub(last))
			}
			last = at
		case <-time.After(10 * time.Second):
			t.Fatalf("job %d of %d never started", i+1, jobs)
		}
		switch i {
		case jobs / 3:
			clock.Jump(t, 10*time.Second) // past a fetch's whole wait (5s at most)
		case 2 * jobs / 3:
			clock.Jump(t, -10*time.Second)
		}
	}
	worst := slices.Max(gaps)
	t.Logf("%d jobs across a 10s forward and a 10s backward jump; the longest gap between starts %v", jobs, worst.Round(time.Millisecond))
	require.Less(t, worst, 500*time.Millisecond, "the worker does not stall after a jump")
}
