package baton_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/internal/redistest"
)

// A key of limit 1 works off its backlog through chained jobs, each started
// on the worker of the job ahead as that one returns: in insertion order,
// one at a time, with rising fences. So does a client working two queues,
// as long as it has workers free.
func TestChainedJobsRunInOrder(t *testing.T) {
	t.Run("OneQueue", func(t *testing.T) { testChainedJobsRunInOrder(t, nil) })
	t.Run("TwoQueues", func(t *testing.T) {
		testChainedJobsRunInOrder(t, []baton.QueueConfig{{Name: "default", Weight: 3}, {Name: "other", Weight: 1}})
	})
}

func testChainedJobsRunInOrder(t *testing.T, queues []baton.QueueConfig) {
	eachBackend(t, func(t *testing.T) {
		t.Parallel()
		d := &countingDriver{JobDriver: newJobDriver(t)}
		seen := newPerKey()
		var mu sync.Mutex
		var order []int
		var done atomic.Int32
		workers := baton.NewWorkers()
		baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(_ context.Context, job *baton.Job[webhookArgs]) error {
			seen.enter(job.Key, job.Fence)
			mu.Lock()
			order = append(order, job.Args.N)
			mu.Unlock()
			time.Sleep(time.Millisecond)
			seen.leave(job.Key)
			done.Add(1)
			return nil
		}), &baton.WorkerOpts{Concurrency: byCustomer(1)})
		c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 8, Queues: queues, Logger: quiet,
			PollInterval: 5 * time.Second})
		require.NoError(t, err)
		const n = 40
		insertBacklog(t, c, "a", n)
		start(t, c)
		require.Eventually(t, func() bool { return done.Load() == n }, 10*time.Second, time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		for i, got := range order {
			require.Equal(t, i, got, "the key's jobs ran out of order: %v", order)
		}
		require.Equal(t, 1, seen.most["customer:a"])
		fences := seen.fences["customer:a"]
		for i := 1; i < len(fences); i++ {
			require.Greater(t, fences[i], fences[i-1])
		}
		t.Logf("%d of %d jobs chained", d.chained.Load(), n)
		require.GreaterOrEqual(t, d.chained.Load(), int64(n-3), "the key's jobs were not chained")
	})
}

// A client working two queues gives a chained job back when its other
// workers are all busy: the other queue may be waiting for the worker. The
// job then runs after its promotion, its attempt counted once.
func TestChainedJobGivenBackWhenPoolBusy(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		t.Parallel()
		d := &countingDriver{JobDriver: newJobDriver(t)}
		release0, releaseOther := make(chan struct{}), make(chan struct{})
		var otherRunning atomic.Int32
		type run struct{ n, attempt int }
		runs := make(chan run, 10)
		workers := baton.NewWorkers()
		baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(ctx context.Context, job *baton.Job[webhookArgs]) error {
			select {
			case runs <- run{job.Args.N, job.Attempt}:
			default:
			}
			if job.Args.N == 0 {
				select {
				case <-release0:
				case <-ctx.Done():
				}
			}
			return nil
		}), &baton.WorkerOpts{Concurrency: byCustomer(1)})
		baton.AddWorker(workers, baton.WorkFunc[emailArgs](func(ctx context.Context, _ *baton.Job[emailArgs]) error {
			otherRunning.Add(1)
			select {
			case <-releaseOther:
			case <-ctx.Done():
			}
			return nil
		}), nil)
		c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 3, Logger: quiet,
			Queues: []baton.QueueConfig{{Name: "default"}, {Name: "other"}}, PollInterval: 50 * time.Millisecond})
		require.NoError(t, err)
		ctx := t.Context()
		for i := range 2 {
			_, err := c.Insert(ctx, webhookArgs{Customer: "a", N: i}, nil)
			require.NoError(t, err)
		}
		start(t, c)
		var once0, onceOther sync.Once
		free0 := func() { once0.Do(func() { close(release0) }) }
		freeOther := func() { onceOther.Do(func() { close(releaseOther) }) }
		t.Cleanup(func() { free0(); freeOther() }) // before Stop, should the test fail
		select {
		case r := <-runs:
			require.Equal(t, run{0, 1}, r)
		case <-time.After(5 * time.Second):
			t.Fatal("job 0 did not run")
		}
		require.Eventually(t, func() bool { return d.chained.Load() == 1 }, 5*time.Second, time.Millisecond,
			"job 1 chained behind job 0 while two workers were free")
		for range 2 {
			_, err := c.Insert(ctx, emailArgs{To: "x"}, &baton.InsertOpts{Queue: "other"})
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool { return otherRunning.Load() == 2 }, 5*time.Second, time.Millisecond)
		free0() // job 0 returns with no other worker free
		select {
		case r := <-runs:
			require.Equal(t, run{1, 1}, r, "job 1 runs once, after its promotion, its chained attempt given back")
		case <-time.After(5 * time.Second):
			t.Fatal("job 1 did not run")
		}
		require.Equal(t, int64(1), d.unchained.Load(), "job 0's outcome gave job 1 back")
		freeOther()
	})
}

// With StrictPriority, a low queue's key working off a backlog through
// chained jobs yields its worker to the high queue once the pool is busy:
// high jobs inserted meanwhile get every worker, and the key's chain goes
// on after them.
func TestChainYieldsToStrictPriority(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		t.Parallel()
		d := &countingDriver{JobDriver: newJobDriver(t)}
		release := make(chan struct{})
		var once sync.Once
		free := func() { once.Do(func() { close(release) }) }
		var lowStarts, highRunning atomic.Int32
		workers := baton.NewWorkers()
		baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(context.Context, *baton.Job[webhookArgs]) error {
			lowStarts.Add(1)
			time.Sleep(5 * time.Millisecond)
			return nil
		}), &baton.WorkerOpts{Concurrency: byCustomer(1), Queue: "low"})
		baton.AddWorker(workers, baton.WorkFunc[emailArgs](func(ctx context.Context, _ *baton.Job[emailArgs]) error {
			highRunning.Add(1)
			defer highRunning.Add(-1)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}), &baton.WorkerOpts{Queue: "high"})
		c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 2, Logger: quiet, StrictPriority: true,
			Queues: []baton.QueueConfig{{Name: "high"}, {Name: "low"}}, PollInterval: 50 * time.Millisecond})
		require.NoError(t, err)
		ctx := t.Context()
		const n = 200
		insertBacklog(t, c, "a", n)
		start(t, c)
		t.Cleanup(free) // before Stop, should the test fail
		require.Eventually(t, func() bool { return d.chained.Load() >= 3 }, 5*time.Second, time.Millisecond,
			"the key's jobs chained while a worker was free")
		atInsert := lowStarts.Load()
		for range 3 {
			_, err := c.Insert(ctx, emailArgs{To: "x"}, nil)
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool { return highRunning.Load() == 2 }, 5*time.Second, time.Millisecond,
			"the high queue got both workers")
		before := lowStarts.Load()
		require.LessOrEqual(t, before, atInsert+3, "the key's chain kept a worker from the high queue")
		time.Sleep(30 * time.Millisecond)
		require.Equal(t, before, lowStarts.Load(), "no job of the low queue started while high jobs held every worker")
		t.Logf("%d chained jobs given back", d.unchained.Load())
		free()
		require.Eventually(t, func() bool { return lowStarts.Load() == n }, 10*time.Second, time.Millisecond)
	})
}

// flakyFinish fails the first JobFinish that records job fail's outcome,
// and delays every one that records job slow's by slowBy.
type flakyFinish struct {
	batondriver.JobDriver
	fail, slow string
	slowBy     time.Duration
	failed     atomic.Bool
}

func (d *flakyFinish) JobFinish(ctx context.Context, p *batondriver.JobFinishParams) (*batondriver.JobFinishResult, error) {
	for _, f := range p.Finished {
		if f.ID == d.fail && d.failed.CompareAndSwap(false, true) {
			return nil, errors.New("injected: backend unreachable")
		}
		if f.ID == d.slow {
			time.Sleep(d.slowBy)
		}
	}
	return d.JobDriver.JobFinish(ctx, p)
}

// When the finish of a job with a job chained behind it fails, that chained
// job goes ahead on its own; the retry, landing while its outcome is still
// on the way, hands it the slot but chains nothing behind it, so the key's
// order holds.
func TestChainOrderSurvivesFailedFinish(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		t.Parallel()
		d := &flakyFinish{JobDriver: newJobDriver(t), slowBy: 100 * time.Millisecond}
		var mu sync.Mutex
		var order []int
		var done atomic.Int32
		workers := baton.NewWorkers()
		baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(_ context.Context, job *baton.Job[webhookArgs]) error {
			mu.Lock()
			order = append(order, job.Args.N)
			mu.Unlock()
			done.Add(1)
			return nil
		}), &baton.WorkerOpts{Concurrency: byCustomer(1)})
		c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 4, Logger: quiet, PollInterval: 50 * time.Millisecond})
		require.NoError(t, err)
		const n = 6
		ids := insertBacklog(t, c, "a", n)
		d.fail, d.slow = ids[0], ids[1]
		start(t, c)
		require.Eventually(t, func() bool { return done.Load() == n }, 10*time.Second, time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []int{0, 1, 2, 3, 4, 5}, order)
		require.True(t, d.failed.Load())
	})
}

// downQueue fails every JobFinish of one queue until a time.
type downQueue struct {
	batondriver.JobDriver
	queue string
	until time.Time
}

func (d *downQueue) JobFinish(ctx context.Context, p *batondriver.JobFinishParams) (*batondriver.JobFinishResult, error) {
	if p.Queue == d.queue && time.Now().Before(d.until) {
		return nil, errors.New("injected: this queue's node is down")
	}
	return d.JobDriver.JobFinish(ctx, p)
}

// A queue whose outcomes cannot be recorded holds up no other queue: a key's
// chained jobs in a healthy queue carry on while the other queue's finishes
// fail and retry.
func TestFailingQueueHoldsUpNoOther(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		t.Parallel()
		const down = 2 * time.Second
		d := &downQueue{JobDriver: newJobDriver(t), queue: "other"}
		var done atomic.Int32
		workers := baton.NewWorkers()
		baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(context.Context, *baton.Job[webhookArgs]) error {
			time.Sleep(5 * time.Millisecond)
			done.Add(1)
			return nil
		}), &baton.WorkerOpts{Concurrency: byCustomer(1)})
		baton.AddWorker(workers, baton.WorkFunc[emailArgs](func(context.Context, *baton.Job[emailArgs]) error { return nil }), nil)
		c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 4, Logger: quiet,
			Queues: []baton.QueueConfig{{Name: "default"}, {Name: "other"}}, PollInterval: 50 * time.Millisecond})
		require.NoError(t, err)
		ctx := t.Context()
		const n = 20
		jobs := make([]*baton.InsertManyParams, n)
		for i := range jobs {
			jobs[i] = &baton.InsertManyParams{Args: webhookArgs{Customer: "a", N: i}}
		}
		for range 4 {
			jobs = append(jobs, &baton.InsertManyParams{Args: emailArgs{To: "x"}, Opts: &baton.InsertOpts{Queue: "other"}})
		}
		_, err = c.InsertMany(ctx, jobs)
		require.NoError(t, err)
		d.until = time.Now().Add(down)
		start(t, c)
		require.Eventually(t, func() bool { return done.Load() == n }, down/2, time.Millisecond,
			"the key's jobs waited for the other queue's outcomes")
	})
}

// A job chained behind one that returns once Stop has begun does not run:
// it goes back to the head of its key's parked jobs, its attempt not
// counted, so the key's order holds across a restart.
func TestChainedJobUnchainedAtStop(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		t.Parallel()
		d := &countingDriver{JobDriver: newJobDriver(t)}
		release := make(chan struct{})
		began := make(chan struct{}, 1)
		var ran atomic.Int32
		workers := baton.NewWorkers()
		baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(_ context.Context, job *baton.Job[webhookArgs]) error {
			ran.Add(1)
			if job.Args.N == 0 {
				began <- struct{}{}
				<-release
			}
			return nil
		}), &baton.WorkerOpts{Concurrency: byCustomer(1)})
		c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 4, Logger: quiet, PollInterval: 5 * time.Second})
		require.NoError(t, err)
		ids := insertBacklog(t, c, "a", 3)
		require.NoError(t, c.Start(context.Background()))
		<-began
		require.Eventually(t, func() bool { return d.chained.Load() == 1 }, 5*time.Second, time.Millisecond,
			"the second job is chained behind the first")

		stopped := stopAsync(c, 5*time.Second)
		time.Sleep(50 * time.Millisecond) // Stop waits for the running job
		close(release)
		require.NoError(t, <-stopped)
		require.EqualValues(t, 1, ran.Load(), "only the job that was running ran")

		ctx := t.Context()
		first, err := c.JobGet(ctx, "default", ids[0])
		require.NoError(t, err)
		require.Equal(t, baton.JobStateCompleted, first.State)
		second, err := c.JobGet(ctx, "default", ids[1])
		require.NoError(t, err)
		require.Equal(t, baton.JobStateAvailable, second.State, "the chained job went back to the head of its key")
		require.Zero(t, second.Attempt, "its attempt is not counted")
		third, err := c.JobGet(ctx, "default", ids[2])
		require.NoError(t, err)
		require.Equal(t, baton.JobStateParked, third.State)
	})
}

// With Redis paused, the job ahead's lease is lost: the job chained behind
// it must not start when that handler returns. Once Redis is back and the
// lease has expired, the chained job runs first, its chained attempt not
// counted, and never alongside a handler of its key; the fetches that gave
// up while Redis was paused lease nothing when it runs them.
func TestChainedJobWaitsOutLostLease(t *testing.T) {
	t.Parallel()
	srv := redistest.StartT(t, nil)
	d := &countingDriver{JobDriver: redisDriver(t, srv.Addr(), "")}

	const leaseTTL = 600 * time.Millisecond
	seen := newPerKey()
	lost := make(chan struct{})
	began := make(chan struct{}, 1)
	type run struct{ n, attempt int }
	runs := make(chan run, 100)
	var first atomic.Bool
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(ctx context.Context, job *baton.Job[webhookArgs]) error {
		seen.enter(job.Key, job.Fence)
		defer seen.leave(job.Key)
		select {
		case runs <- run{job.Args.N, job.Attempt}:
		default: // more runs than expected: the test fails on the first ones
		}
		if job.Args.N == 0 && first.CompareAndSwap(false, true) {
			began <- struct{}{}
			<-ctx.Done()
			close(lost)
			return ctx.Err()
		}
		return nil
	}), &baton.WorkerOpts{Concurrency: byCustomer(1)})
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 4, LeaseTTL: leaseTTL,
		PollInterval: 100 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 2 {
		_, err := c.Insert(ctx, webhookArgs{Customer: "a", N: i}, nil)
		require.NoError(t, err)
	}
	start(t, c)
	<-began
	require.Eventually(t, func() bool { return d.chained.Load() == 1 }, 5*time.Second, time.Millisecond)

	require.NoError(t, srv.Pause())
	paused := time.Now()
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		_ = srv.Resume()
		t.Fatal("the handler's context was not cancelled while Redis was paused")
	}
	// Paused longer than a fetch waits for its reply (LeaseTTL): the
	// fetches sent early in the pause have given up when Redis runs them.
	time.Sleep(max(50*time.Millisecond, time.Until(paused.Add(leaseTTL+150*time.Millisecond))))
	require.NoError(t, srv.Resume())

	got := []run{<-runs}
	for len(got) < 3 {
		select {
		case r := <-runs:
			got = append(got, r)
		case <-time.After(10 * time.Second):
			t.Fatalf("runs so far: %v", got)
		}
	}
	// The chained job goes back to the head of its key's parked jobs, its
	// attempt not counted, and runs before the lost job's retry. (Fetches
	// that stalled with Redis and whose callers gave up lease nothing when
	// Redis runs them after all: see batonredis's serverclock.go.)
	require.Equal(t, []run{{0, 1}, {1, 1}, {0, 2}}, got)
	require.Equal(t, 1, seen.most["customer:a"])
}

// A stop and a restart keep a key's order: the job cut off by Stop goes
// back holding its key's slot, and the job chained behind it back to the
// head of the parked jobs, so the next client runs the cut-off job first,
// then the rest in order.
func TestKeyOrderSurvivesStop(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		t.Parallel()
		d := newJobDriver(t)
		type run struct{ n, attempt int }
		var mu sync.Mutex
		var runs []run
		started := make(chan struct{})
		newClient := func() *baton.Client {
			workers := baton.NewWorkers()
			baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(ctx context.Context, job *baton.Job[webhookArgs]) error {
				mu.Lock()
				runs = append(runs, run{job.Args.N, job.Attempt})
				mu.Unlock()
				if job.Args.N == 0 && job.Attempt == 1 {
					close(started)
					<-ctx.Done() // until Stop cuts it off
					return ctx.Err()
				}
				return nil
			}), &baton.WorkerOpts{Concurrency: byCustomer(1)})
			c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 4, Logger: quiet})
			require.NoError(t, err)
			return c
		}
		first := newClient()
		const n = 5
		insertBacklog(t, first, "a", n)
		require.NoError(t, first.Start(t.Context()))
		select {
		case <-started:
		case <-time.After(5 * time.Second):
			t.Fatal("job 0 did not start")
		}
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, first.Stop(ctx), context.DeadlineExceeded, "Stop cut job 0 off")

		second := newClient()
		start(t, second)
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(runs) == n+1
		}, 10*time.Second, time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		want := []run{{0, 1}, {0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}}
		require.Equal(t, want, runs, "job 0 again first, its cut-off attempt not counted, then the rest in order")
	})
}

// slowFinishes holds every JobFinish for delay before the backend sees it,
// as a slow network would.
type slowFinishes struct {
	batondriver.JobDriver
	delay time.Duration
}

func (d *slowFinishes) JobFinish(ctx context.Context, p *batondriver.JobFinishParams) (*batondriver.JobFinishResult, error) {
	select {
	case <-time.After(d.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return d.JobDriver.JobFinish(ctx, p)
}

// A chain lives on one lease, renewed by the heartbeat while the chain
// lasts, even when its handlers are short and its finishes slow: a chained
// job that has returned waits for the outcome of the job ahead, and its
// lease is the next chained job's. A chain several leases long runs every
// job once, its attempt counted, and loses no lease.
func TestChainOutlivesItsLease(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		t.Parallel()
		// A lease long enough that a loaded machine's stalls do not outlast
		// it (at 300ms, a job once ran twice under a load average of 12,
		// its renewal late), short enough that the chain is four leases.
		const leaseTTL = 600 * time.Millisecond
		d := &countingDriver{JobDriver: &slowFinishes{JobDriver: newJobDriver(t), delay: 60 * time.Millisecond}}
		var mu sync.Mutex
		runs := map[string]int{}
		var lost atomic.Int32
		workers := baton.NewWorkers()
		baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(_ context.Context, job *baton.Job[webhookArgs]) error {
			mu.Lock()
			runs[job.ID]++
			mu.Unlock()
			return nil
		}), &baton.WorkerOpts{Concurrency: byCustomer(1)})
		c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 2, LeaseTTL: leaseTTL,
			PollInterval: 50 * time.Millisecond, Logger: quiet,
			OnJobEnd: func(ev *baton.JobEvent) {
				if ev.Outcome == baton.JobOutcomeLost {
					lost.Add(1)
				}
			}})
		require.NoError(t, err)
		const n = 40 // some 60ms each: four leases
		ids := insertBacklog(t, c, "a", n)
		start(t, c)
		require.Eventually(t, completed(t, c, n), 20*time.Second, 5*time.Millisecond)
		require.Zero(t, lost.Load(), "leases lost")
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			row, err := c.JobGet(t.Context(), "default", id)
			require.NoError(t, err)
			require.Equal(t, [2]int{1, 1}, [2]int{runs[id], row.Attempt}, "runs and attempts of job %s", id)
		}
		require.GreaterOrEqual(t, d.chained.Load(), int64(n-3), "the key's jobs were not chained")
	})
}

// congestedFinishes stalls the first finish of each of the stall jobs
// until its caller gives up (a call that never reached the server), so
// that the completer's call slots are all taken; it runs the first finish
// of the job ahead at once but holds its reply, within the call's
// deadline, until the outcome of the job chained behind it is recorded.
type congestedFinishes struct {
	batondriver.JobDriver
	mu        sync.Mutex
	stall     map[string]int // stall job ID -> its place, until its finish is stalled
	gates     [5]chan struct{}
	ahead     string // the job ahead's ID, until its finish is held
	chained   string // the ID of the job chained behind it
	recorded  chan struct{}
	record    sync.Once
	heldReply // of the job ahead's finish
}

func (d *congestedFinishes) JobFinish(ctx context.Context, p *batondriver.JobFinishParams) (*batondriver.JobFinishResult, error) {
	d.mu.Lock()
	stall, hold, chained := -1, false, false
	for _, f := range p.Finished {
		if i, ok := d.stall[f.ID]; ok {
			stall = i
			delete(d.stall, f.ID)
		}
		if f.ID == d.ahead {
			hold, d.ahead = true, ""
		}
		chained = chained || f.ID == d.chained
	}
	d.mu.Unlock()
	if stall >= 0 {
		close(d.gates[stall+1])
		<-ctx.Done()
		return nil, ctx.Err()
	}
	res, err := d.JobDriver.JobFinish(ctx, p)
	if err == nil && chained {
		d.record.Do(func() { close(d.recorded) })
	}
	if hold {
		return d.hold(ctx, d.recorded, res, err)
	}
	return res, err
}

// A chained job that has returned waits for the finish of the job ahead
// at most LeaseTTL. When the completer is congested (its call slots all
// taken by stalled calls), that finish may land after the wait ran out
// and the chained job's worker went on: the job the finish chained behind
// it then has no worker to run on, and must be given back, not left
// leased to nobody until its lease expires and its attempt is counted.
func TestJobChainedBehindAWorkerGoneOnIsGivenBack(t *testing.T) {
	t.Parallel()
	const leaseTTL = 400 * time.Millisecond
	d := &congestedFinishes{JobDriver: batonmem.New(), stall: map[string]int{}, recorded: make(chan struct{})}
	for i := range d.gates {
		d.gates[i] = make(chan struct{})
	}
	close(d.gates[0])
	thirdRan := make(chan int, 10)
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[emailArgs](func(_ context.Context, job *baton.Job[emailArgs]) error {
		var i int
		_, err := fmt.Sscanf(job.Args.To, "stall%d", &i)
		require.NoError(t, err)
		<-d.gates[i] // each stall job's finish in a batch of its own
		return nil
	}), nil)
	baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(_ context.Context, job *baton.Job[webhookArgs]) error {
		switch job.Args.N {
		case 0:
			<-d.gates[4]                       // every call slot taken
			time.Sleep(150 * time.Millisecond) // the finish waits less than the chained job does
		case 2:
			thirdRan <- job.Attempt
		}
		return nil
	}), &baton.WorkerOpts{Concurrency: byCustomer(1)})
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 5, LeaseTTL: leaseTTL,
		PollInterval: 50 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	ids := insertBacklog(t, c, "a", 3)
	d.ahead, d.chained = ids[0], ids[1]
	for i := range 4 {
		res, err := c.Insert(t.Context(), emailArgs{To: fmt.Sprintf("stall%d", i)}, nil)
		require.NoError(t, err)
		d.stall[res.Job.ID] = i
	}
	start(t, c)
	select {
	case attempt := <-thirdRan:
		require.False(t, d.cutOff.Load(), "the held reply of the job ahead's finish came after its deadline")
		require.True(t, d.held.Load())
		require.Equal(t, 1, attempt, "the job chained behind the worker that went on waited out its lease, its attempt counted")
	case <-time.After(5 * time.Second):
		t.Fatal("the third job never ran")
	}
}

// heldFetchDriver holds the fetches made once armed until released (or
// their callers give up), and reports when a wait for inserts is cut off.
type heldFetchDriver struct {
	batondriver.JobDriver
	armed   atomic.Bool
	held    chan struct{} // a value per fetch held
	release chan struct{}
	cut     chan struct{} // a value per wait cut off by its context
}

func (d *heldFetchDriver) JobFetch(ctx context.Context, p *batondriver.JobFetchParams) (*batondriver.JobFetchResult, error) {
	if d.armed.Load() {
		d.held <- struct{}{}
		select {
		case <-d.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return d.JobDriver.JobFetch(ctx, p)
}

func (d *heldFetchDriver) JobWait(ctx context.Context, p *batondriver.JobWaitParams) error {
	err := d.JobDriver.JobWait(ctx, p)
	if ctx.Err() != nil {
		select {
		case d.cut <- struct{}{}:
		default:
		}
	}
	return err
}

// Stop starts no chained job, even while it waits for a fetch in flight
// to be seen through: the job ahead's finish unchains it, and it keeps the
// head of its key's parked jobs, its attempt not counted.
func TestNoChainedJobStartsWhileStopSeesAFetchThrough(t *testing.T) {
	t.Parallel()
	d := &heldFetchDriver{JobDriver: batonmem.New(), held: make(chan struct{}, 10), release: make(chan struct{}),
		cut: make(chan struct{}, 10)}
	release := make(chan struct{})
	began := make(chan struct{}, 1)
	var ran [2]atomic.Int32
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(_ context.Context, job *baton.Job[webhookArgs]) error {
		ran[job.Args.N].Add(1)
		if job.Args.N == 0 {
			began <- struct{}{}
			<-release
		}
		return nil
	}), &baton.WorkerOpts{Concurrency: byCustomer(1)})
	baton.AddWorker(workers, baton.WorkFunc[emailArgs](func(context.Context, *baton.Job[emailArgs]) error { return nil }), nil)
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 2, Logger: quiet, PollInterval: 5 * time.Second})
	require.NoError(t, err)
	ids := insertBacklog(t, c, "a", 2)
	require.NoError(t, c.Start(t.Context()))
	<-began // the second job is chained behind it: the fetch left no job available
	d.armed.Store(true)
	_, err = c.Insert(t.Context(), emailArgs{}, nil)
	require.NoError(t, err)
	<-d.held // the dispatcher's fetch is in flight
	stopped := stopAsync(c, 5*time.Second)
	// Stop has begun once it cuts the wait for inserts off. A waker that
	// was between two waits when Stop began makes no more and is cut off
	// in none: Stop has begun all the same, long before the second.
	select {
	case <-d.cut:
	case <-time.After(time.Second):
	}
	close(release)
	time.Sleep(50 * time.Millisecond) // the first job's worker goes on
	close(d.release)
	require.NoError(t, <-stopped)
	require.EqualValues(t, 0, ran[1].Load(), "the chained job started after Stop began")
	second, err := c.JobGet(t.Context(), "default", ids[1])
	require.NoError(t, err)
	require.Equal(t, baton.JobStateAvailable, second.State)
	require.Zero(t, second.Attempt)
}

// Halting a key while a job is chained behind its running one recalls the
// chained job: the client gives it back before the job ahead returns, it
// waits at the head of the key's parked jobs, its attempt not counted, and
// nothing of the key runs until the limit is raised; then the key's jobs
// run in order. A lowered limit does the same, but for the limit.
func TestHaltRecallsChainedJob(t *testing.T) {
	for _, limit := range []int{0, 1} {
		t.Run(fmt.Sprintf("limit%d", limit), func(t *testing.T) {
			eachBackend(t, func(t *testing.T) { testHaltRecallsChainedJob(t, limit) })
		})
	}
}

func testHaltRecallsChainedJob(t *testing.T, limit int) {
	t.Parallel()
	d := &countingDriver{JobDriver: newJobDriver(t)}
	var gates [5]chan struct{} // job N returns once gates[N] is closed
	for i := range gates {
		gates[i] = make(chan struct{})
	}
	began := make(chan int, 10)
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(ctx context.Context, job *baton.Job[webhookArgs]) error {
		began <- job.Args.N
		select {
		case <-gates[job.Args.N]:
			return nil
		case <-ctx.Done(): // the test failed and stops the client
			return ctx.Err()
		}
	}), &baton.WorkerOpts{Concurrency: byCustomer(2)})
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 4, Logger: quiet, PollInterval: 5 * time.Second})
	require.NoError(t, err)
	ids := insertBacklog(t, c, "a", 5)
	start(t, c)
	ctx := t.Context()
	const key = "customer:a"
	next := func(want int) {
		t.Helper()
		select {
		case n := <-began:
			require.Equal(t, want, n, "the job that started")
		case <-time.After(5 * time.Second):
			t.Fatalf("job %d never started", want)
		}
	}
	none := func() {
		t.Helper()
		select {
		case n := <-began:
			t.Fatalf("job %d ran beyond the limit", n)
		case <-time.After(200 * time.Millisecond):
		}
	}
	require.ElementsMatch(t, []int{0, 1}, []int{<-began, <-began})
	require.Eventually(t, func() bool {
		info, err := c.KeyGet(ctx, "default", key)
		return err == nil && info.Running == 2 && info.Chained == 2
	}, 5*time.Second, time.Millisecond, "two jobs run, a job chained behind each")

	_, err = c.SetLimit(ctx, "default", key, limit)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := c.KeyGet(ctx, "default", key)
		return err == nil && info.Chained == 0 && info.Parked == 3
	}, 5*time.Second, time.Millisecond, "the chained jobs given back")
	for _, id := range ids[2:4] {
		row, err := c.JobGet(ctx, "default", id)
		require.NoError(t, err)
		require.Equal(t, baton.JobStateParked, row.State)
		require.Zero(t, row.Attempt, "a recalled job's attempt is not counted")
	}

	close(gates[0])
	close(gates[1])
	if limit == 0 {
		none()
		_, err = c.SetLimit(ctx, "default", key, 1)
		require.NoError(t, err)
	}
	// One at a time from here, the recalled jobs first, in order.
	for n := 2; n < 5; n++ {
		next(n)
		none()
		close(gates[n])
	}
	require.Eventually(t, func() bool {
		st, err := c.QueueStats(ctx, "default")
		return err == nil && st.Counts[baton.JobStateCompleted] == 5
	}, 5*time.Second, time.Millisecond)
}

// gatedClient starts a client on d, two workers, whose webhookArgs jobs,
// one per customer at a time, report their N on began as they start and
// return once gate is closed (or the client stops), with three jobs of
// customer a inserted in one call: the first runs, the second is chained
// behind it.
func gatedClient(t *testing.T, d batondriver.JobDriver) (c *baton.Client, began chan int, gate chan struct{}, ids []string) {
	t.Helper()
	gate = make(chan struct{})
	began = make(chan int, 10)
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(ctx context.Context, job *baton.Job[webhookArgs]) error {
		began <- job.Args.N
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}), &baton.WorkerOpts{Concurrency: byCustomer(1)})
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 2, Logger: quiet, PollInterval: 5 * time.Second})
	require.NoError(t, err)
	ids = insertBacklog(t, c, "a", 3)
	start(t, c)
	return c, began, gate, ids
}

// heldReplies holds the replies of the fetches made once armed until
// released: the backend has run them, their caller does not know yet.
type heldReplies struct {
	*tappedNotices
	armed   atomic.Bool
	held    chan struct{} // a value per reply held
	release chan struct{}
}

func (d *heldReplies) JobFetch(ctx context.Context, p *batondriver.JobFetchParams) (*batondriver.JobFetchResult, error) {
	res, err := d.tappedNotices.JobFetch(ctx, p)
	if err == nil && len(res.Jobs) > 0 && d.armed.CompareAndSwap(true, false) {
		d.held <- struct{}{}
		<-d.release
	}
	return res, err
}

// A recall heard while the call that chained the jobs is still out gives
// them back as its reply comes: the job ahead runs (it was leased before
// the halt), the chained job does not.
func TestHaltRecallsJobChainedByCallInFlight(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		t.Parallel()
		d := &heldReplies{tappedNotices: tapNotices(newJobDriver(t)), held: make(chan struct{}, 1), release: make(chan struct{})}
		d.armed.Store(true)
		c, began, gate, ids := gatedClient(t, d)
		ctx := t.Context()
		<-d.held
		info, err := c.SetLimit(ctx, "default", "customer:a", 0)
		require.NoError(t, err)
		require.Equal(t, 1, info.Chained, "the held fetch chained a job")
		// The recall is heard before the reply comes: once the client
		// has taken it and the notice after it, give the reply.
		require.NotZero(t, recv(t, d.forwarded, "the recall").Fence)
		d.inject(batondriver.QueueNotice{Key: "nobody"})
		close(d.release)
		require.Equal(t, 0, <-began)
		require.Eventually(t, func() bool {
			info, err := c.KeyGet(ctx, "default", "customer:a")
			return err == nil && info.Chained == 0 && info.Parked == 2
		}, 5*time.Second, time.Millisecond, "the chained job given back")
		close(gate)
		select {
		case n := <-began:
			t.Fatalf("job %d ran on a halted key", n)
		case <-time.After(200 * time.Millisecond):
		}
		row, err := c.JobGet(ctx, "default", ids[1])
		require.NoError(t, err)
		require.Equal(t, baton.JobStateParked, row.State)
		require.Zero(t, row.Attempt)
	})
}

// tappedNotices hands the client its queues' notices itself: each one the
// backend sends, reported on forwarded once the client has taken it, and
// those a test injects. With deaf set, QueueListen fails.
type tappedNotices struct {
	batondriver.JobDriver
	deaf      bool
	out       chan batondriver.QueueNotice // unbuffered: a send returns once the client has the notice
	forwarded chan batondriver.QueueNotice
}

func tapNotices(d batondriver.JobDriver) *tappedNotices {
	return &tappedNotices{JobDriver: d, out: make(chan batondriver.QueueNotice), forwarded: make(chan batondriver.QueueNotice, 100)}
}

// inject hands n to the client, and returns once the client has taken it:
// it has acted on every notice before.
func (d *tappedNotices) inject(n batondriver.QueueNotice) { d.out <- n }

func (d *tappedNotices) QueueListen(ctx context.Context, p *batondriver.QueueParams) (batondriver.QueueListener, error) {
	if d.deaf {
		return nil, errors.New("deaf")
	}
	l, err := d.JobDriver.QueueListen(ctx, p)
	if err != nil {
		return nil, err
	}
	t := &tappedListener{QueueListener: l, out: d.out, done: make(chan struct{})}
	go func() {
		for {
			select {
			case n := <-l.C():
				select {
				case d.out <- n:
					d.forwarded <- n
				case <-t.done:
					return
				}
			case <-t.done:
				return
			}
		}
	}()
	return t, nil
}

type tappedListener struct {
	batondriver.QueueListener
	out  chan batondriver.QueueNotice
	done chan struct{}
	once sync.Once
}

func (l *tappedListener) C() <-chan batondriver.QueueNotice { return l.out }

func (l *tappedListener) Close() {
	l.once.Do(func() { close(l.done) })
	l.QueueListener.Close()
}

// A Recheck (notices may have been lost) gives back every chained job not
// started: it may have been recalled.
func TestRecheckGivesBackChainedJobs(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		t.Parallel()
		d := tapNotices(newJobDriver(t))
		c, began, gate, ids := gatedClient(t, d)
		ctx := t.Context()
		require.Equal(t, 0, recv(t, began, "the first job's start"))
		require.Eventually(t, func() bool {
			info, err := c.KeyGet(ctx, "default", "customer:a")
			return err == nil && info.Chained == 1
		}, 5*time.Second, time.Millisecond, "a job chained behind the first")
		d.inject(batondriver.QueueNotice{Recheck: true})
		require.Eventually(t, func() bool {
			info, err := c.KeyGet(ctx, "default", "customer:a")
			return err == nil && info.Chained == 0 && info.Parked == 2
		}, 5*time.Second, time.Millisecond, "the chained job given back")
		row, err := c.JobGet(ctx, "default", ids[1])
		require.NoError(t, err)
		require.Zero(t, row.Attempt)
		// The key goes on, in order.
		close(gate)
		require.Equal(t, 1, recv(t, began, "the second job's start"))
		require.Equal(t, 2, recv(t, began, "the third job's start"))
	})
}

// A client that cannot hear a queue's notices chains none of its jobs (a
// halt could not reach them), and runs them all the same.
func TestNoChainsWhileDeaf(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		t.Parallel()
		d := tapNotices(newJobDriver(t))
		d.deaf = true
		counted := &countingDriver{JobDriver: d}
		workers, done := countingWorkers[webhookArgs](&baton.WorkerOpts{Concurrency: byCustomer(1)})
		c, err := baton.NewClient(counted, &baton.Config{Workers: workers, Concurrency: 4, Logger: quiet, PollInterval: 5 * time.Second})
		require.NoError(t, err)
		insertBacklog(t, c, "a", 20)
		start(t, c)
		require.Eventually(t, func() bool { return done.Load() == 20 }, 10*time.Second, time.Millisecond)
		require.Zero(t, counted.chained.Load(), "jobs chained by a client that hears no recalls")
	})
}
