package baton_test

// Tests written to kill mutants of the runner, the inserter, the schedules
// and the backends' unique claims that the other tests let survive: each
// pins down one behaviour that nothing else checked.

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
)

// The pool never runs more handlers than Config.Concurrency: a finish
// that hands a worker on and leases its next job frees no worker for it.
func TestHandoffKeepsConcurrency(t *testing.T) {
	const jobs = 4
	var running atomic.Int32
	overlap := make(chan struct{})
	var once sync.Once
	c, _ := setup(t, baton.WorkFunc[emailArgs](func(context.Context, *baton.Job[emailArgs]) error {
		defer running.Add(-1)
		if running.Add(1) > 1 {
			once.Do(func() { close(overlap) })
		}
		select { // long enough for a worker freed by mistake to fetch
		case <-overlap:
		case <-time.After(200 * time.Millisecond):
		}
		return nil
	}), &baton.Config{Concurrency: 1})
	for range jobs {
		_, err := c.Insert(t.Context(), emailArgs{}, nil)
		require.NoError(t, err)
	}
	start(t, c)
	require.Eventually(t, completed(t, c, jobs), 10*time.Second, 5*time.Millisecond)
	select {
	case <-overlap:
		require.Fail(t, "two handlers ran at once with Concurrency 1")
	default:
	}
}

// failFirstFinish fails the first JobFinish without the backend seeing it.
type failFirstFinish struct {
	batondriver.JobDriver
	failed atomic.Bool
}

func (d *failFirstFinish) JobFinish(ctx context.Context, p *batondriver.JobFinishParams) (*batondriver.JobFinishResult, error) {
	if len(p.Finished) > 0 && d.failed.CompareAndSwap(false, true) {
		return nil, errors.New("injected: connection reset")
	}
	return d.JobDriver.JobFinish(ctx, p)
}

// A worker handed to the completer with an outcome whose call failed goes
// back to the pool: the retry records the outcome without leasing, so the
// worker must not wait for it, nor be lost.
func TestFailedFinishGivesItsWorkerBack(t *testing.T) {
	t.Parallel()
	d := &failFirstFinish{JobDriver: newJobDriver(t)}
	w := baton.NewWorkers()
	baton.AddWorker(w, baton.WorkFunc[emailArgs](noop), nil)
	c, err := baton.NewClient(d, &baton.Config{Workers: w, Concurrency: 1, Logger: quiet, PollInterval: 5 * time.Second})
	require.NoError(t, err)
	for range 2 {
		_, err := c.Insert(t.Context(), emailArgs{}, nil)
		require.NoError(t, err)
	}
	start(t, c)
	require.Eventually(t, completed(t, c, 2), 4*time.Second, 5*time.Millisecond,
		"the second job never ran: the worker of the failed finish was lost")
	require.True(t, d.failed.Load())
}

// extendLog tells of the lease IDs each renewal carries.
type extendLog struct {
	batondriver.JobDriver
	calls chan []string
}

func (d *extendLog) JobExtend(ctx context.Context, p *batondriver.JobExtendParams) (*batondriver.JobExtendResult, error) {
	var ids []string
	for _, l := range p.Leases {
		ids = append(ids, l.ID)
	}
	select {
	case d.calls <- ids:
	default:
	}
	return d.JobDriver.JobExtend(ctx, p)
}

// A job's lease is renewed until its outcome is recorded, and no longer:
// the renewals of later jobs do not carry it on.
func TestRecordedOutcomeIsNoLongerRenewed(t *testing.T) {
	t.Parallel()
	d := &extendLog{JobDriver: newJobDriver(t), calls: make(chan []string, 64)}
	release := make(chan struct{})
	w := baton.NewWorkers()
	baton.AddWorker(w, baton.WorkFunc[emailArgs](func(_ context.Context, job *baton.Job[emailArgs]) error {
		if job.Args.To == "long" {
			<-release
		}
		return nil
	}), nil)
	c, err := baton.NewClient(d, &baton.Config{Workers: w, LeaseTTL: 300 * time.Millisecond, Logger: quiet, PollInterval: 5 * time.Second})
	require.NoError(t, err)
	start(t, c)
	first, err := c.Insert(t.Context(), emailArgs{To: "quick"}, nil)
	require.NoError(t, err)
	require.Eventually(t, completed(t, c, 1), 5*time.Second, 5*time.Millisecond)
	long, err := c.Insert(t.Context(), emailArgs{To: "long"}, nil)
	require.NoError(t, err)
	var last []string
	for seen := 0; seen < 3; {
		ids := <-d.calls
		if slices.Contains(ids, long.Job.ID) {
			seen++
			last = ids
		}
	}
	close(release)
	require.NotContains(t, last, first.Job.ID, "a job recorded long ago still has its lease renewed")
	require.Eventually(t, completed(t, c, 2), 5*time.Second, 5*time.Millisecond)
}

// stuck is a buggy schedule whose next tick is the time it is given.
type stuck struct{}

func (stuck) Next(t time.Time) time.Time { return t }

// A schedule whose next tick is not after the time given fires no more
// (nextTick): it neither fires the same tick over and over nor holds up
// Stop.
func TestScheduleThatDoesNotMoveOn(t *testing.T) {
	var fired atomic.Int32
	c, _ := setup(t, baton.WorkFunc[emailArgs](noop), &baton.Config{
		PeriodicJobs: []*baton.PeriodicJob{{
			Name: "stuck", Schedule: stuck{},
			Job: func(time.Time) (baton.JobArgs, *baton.InsertOpts) {
				fired.Add(1)
				return emailArgs{}, nil
			},
		}},
	})
	require.NoError(t, c.Start(context.Background()))
	select {
	case err := <-stopAsync(c, 5*time.Second):
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		require.Fail(t, "Stop hangs: the schedule spins on a tick that does not move on")
	}
	require.Zero(t, fired.Load())
}

// At Start, a schedule registered in several queues (its jobs moved) is
// renewed where a client last saw it, not in the queue it left.
func TestScheduleRenewedWhereLastSeen(t *testing.T) {
	nightly, err := baton.Cron("0 3 * * *")
	require.NoError(t, err)
	c, d := setup(t, baton.WorkFunc[emailArgs](noop), &baton.Config{
		PeriodicJobs: []*baton.PeriodicJob{{
			Name: "nightly", Schedule: nightly,
			Job: func(time.Time) (baton.JobArgs, *baton.InsertOpts) {
				return emailArgs{}, &baton.InsertOpts{Queue: "new"}
			},
		}},
	})
	ctx := t.Context()
	register := func(queue string) {
		require.NoError(t, d.QueueScheduleRegister(ctx, &batondriver.QueueScheduleParams{
			Queue: queue, Name: "nightly", Spec: "0 4 * * *", Kind: "email", TTL: time.Hour,
		}))
		_, err := c.Insert(ctx, emailArgs{}, &baton.InsertOpts{Queue: queue}) // ScheduleList lists the queues with jobs
		require.NoError(t, err)
	}
	register("old")
	seen := func() map[string]*baton.ScheduleInfo {
		list, err := c.ScheduleList(ctx)
		require.NoError(t, err)
		m := map[string]*baton.ScheduleInfo{}
		for _, s := range list {
			m[s.Queue] = s
		}
		return m
	}
	// Registered in "new" later than in "old", by the backend's clock.
	require.Eventually(t, func() bool {
		register("new")
		m := seen()
		return len(m) == 2 && m["new"].SeenAt.After(m["old"].SeenAt)
	}, 5*time.Second, 2*time.Millisecond)

	start(t, c)
	require.Eventually(t, func() bool { return seen()["new"].Spec == "0 3 * * *" }, 5*time.Second, 10*time.Millisecond,
		"the client did not renew the registration last seen")
	require.Equal(t, "0 4 * * *", seen()["old"].Spec, "the client renewed the registration it had left")
}

// Rejections are wrapped with the job's index only when several jobs were
// inserted, and a priority of MaxPriority is in range.
func TestInsertEdges(t *testing.T) {
	c, _ := setup(t, baton.WorkFunc[emailArgs](noop), nil)
	ctx := t.Context()
	_, err := c.Insert(ctx, emailArgs{To: "top"}, &baton.InsertOpts{Priority: batondriver.MaxPriority})
	require.NoError(t, err, "MaxPriority is in range")

	opts := &baton.InsertOpts{Unique: &baton.UniqueOpts{OnConflict: baton.UniqueReject}}
	_, err = c.Insert(ctx, emailArgs{To: "once"}, opts)
	require.NoError(t, err)
	_, err = c.Insert(ctx, emailArgs{To: "once"}, opts)
	require.ErrorIs(t, err, baton.ErrDuplicate)
	require.NotContains(t, err.Error(), "insert #", "a single insert's rejection names no index")
	_, err = c.InsertMany(ctx, []*baton.InsertManyParams{{Args: emailArgs{To: "other"}, Opts: opts}, {Args: emailArgs{To: "once"}, Opts: opts}})
	require.ErrorIs(t, err, baton.ErrDuplicate)
	require.Contains(t, err.Error(), "insert #1: ")
}

// fetchLog tells of each fetch once it has returned, and counts the
// outcomes that unchain a job.
type fetchLog struct {
	batondriver.JobDriver
	mu        sync.Mutex
	fetched   map[string]int // returned fetches by queue
	chain     []bool         // each fetch's Chain
	out       int            // fetches in flight
	last      time.Time      // when the last fetch returned
	unchained atomic.Int64
}

func (d *fetchLog) JobFetch(ctx context.Context, p *batondriver.JobFetchParams) (*batondriver.JobFetchResult, error) {
	d.mu.Lock()
	d.out++
	d.mu.Unlock()
	res, err := d.JobDriver.JobFetch(ctx, p)
	d.mu.Lock()
	d.out--
	d.last = time.Now()
	d.fetched[p.Queue]++
	d.chain = append(d.chain, p.Chain)
	d.mu.Unlock()
	return res, err
}

// settled reports whether a fetch of each of the two queues has returned
// and none has been made for a while: the dispatcher waits (for a wake-up
// or its poll), so that no fetch is in flight when a job returns.
func (d *fetchLog) settled() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fetched["default"] > 0 && d.fetched["other"] > 0 && d.out == 0 && time.Since(d.last) > 100*time.Millisecond
}

func (d *fetchLog) JobFinish(ctx context.Context, p *batondriver.JobFinishParams) (*batondriver.JobFinishResult, error) {
	for _, f := range p.Finished {
		if f.Unchain {
			d.unchained.Add(1)
		}
	}
	return d.JobDriver.JobFinish(ctx, p)
}

// fetchedBoth reports whether a fetch of each of the two queues has
// returned.
func (d *fetchLog) fetchedBoth() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fetched["default"] > 0 && d.fetched["other"] > 0
}

// A client working two queues runs a job chained behind one that returns
// while other workers are free and no fetch is in flight: it unchains it
// only when no other worker is free (but those a fetch in flight asks
// jobs for), and a fetch that has returned asks for none.
func TestTwoQueuesRunChainedJobWhileWorkersFree(t *testing.T) {
	t.Parallel()
	d := &fetchLog{JobDriver: newJobDriver(t), fetched: map[string]int{}}
	gate, started := make(chan struct{}), make(chan struct{})
	var done atomic.Int32
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(_ context.Context, job *baton.Job[webhookArgs]) error {
		if job.Args.N == 0 {
			close(started)
			<-gate
		}
		done.Add(1)
		return nil
	}), &baton.WorkerOpts{Concurrency: byCustomer(1)})
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 3, Logger: quiet,
		Queues: []baton.QueueConfig{{Name: "default"}, {Name: "other"}}, PollInterval: 5 * time.Second})
	require.NoError(t, err)
	insertBacklog(t, c, "a", 2)
	start(t, c)
	<-started
	require.Eventually(t, d.settled, 5*time.Second, time.Millisecond)
	close(gate)
	require.Eventually(t, func() bool { return done.Load() == 2 }, 10*time.Second, time.Millisecond)
	require.Zero(t, d.unchained.Load(), "the chained job was unchained though two workers were free")
}

// A client working two queues with one worker asks for no chained job: it
// would go back unrun, the only worker being needed for the other queue.
func TestOneWorkerOfTwoQueuesAsksNoChain(t *testing.T) {
	t.Parallel()
	d := &fetchLog{JobDriver: newJobDriver(t), fetched: map[string]int{}}
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[emailArgs](noop), nil)
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 1, Logger: quiet,
		Queues: []baton.QueueConfig{{Name: "default"}, {Name: "other"}}, PollInterval: 5 * time.Second})
	require.NoError(t, err)
	start(t, c)
	require.Eventually(t, d.fetchedBoth, 5*time.Second, time.Millisecond)
	d.mu.Lock()
	defer d.mu.Unlock()
	require.NotContains(t, d.chain, true, "a fetch asked for chained jobs with no other worker to spare")
}

// Delay wins over RunAt when both are set (InsertOpts): the job is due
// after the delay, and the backend, which refuses both, gets the delay
// only.
func TestInsertDelayWinsOverRunAt(t *testing.T) {
	c, _ := setup(t, baton.WorkFunc[emailArgs](noop), nil)
	res, err := c.Insert(t.Context(), emailArgs{}, &baton.InsertOpts{RunAt: time.Now().Add(time.Hour), Delay: time.Minute})
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(time.Minute), res.Job.RunAt, 10*time.Second)
}

// stalledTick holds the first periodic insert until its context ends, and,
// as a network client does, fails any insert whose context has ended.
type stalledTick struct {
	batondriver.JobDriver
	stalled atomic.Pointer[time.Time] // the tick held
}

func (d *stalledTick) JobInsert(ctx context.Context, p *batondriver.JobInsertParams) (*batondriver.JobInsertResult, error) {
	if p.Once != nil && d.stalled.CompareAndSwap(nil, &p.Once.Tick) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return d.JobDriver.JobInsert(ctx, p)
}

// A tick whose insert cannot be made before the next tick is given up:
// the schedule goes on with the ticks after it.
func TestStalledTickIsGivenUp(t *testing.T) {
	t.Parallel()
	d := &stalledTick{JobDriver: newJobDriver(t)}
	every, err := baton.Every(50 * time.Millisecond)
	require.NoError(t, err)
	w := baton.NewWorkers()
	baton.AddWorker(w, baton.WorkFunc[emailArgs](noop), nil)
	c, err := baton.NewClient(d, &baton.Config{Workers: w, Logger: quiet, PollInterval: 5 * time.Second,
		PeriodicJobs: []*baton.PeriodicJob{{
			Name: "tick", Schedule: every,
			Job: func(tick time.Time) (baton.JobArgs, *baton.InsertOpts) {
				return emailArgs{To: tick.Format(time.RFC3339Nano)}, nil
			},
		}},
	})
	require.NoError(t, err)
	start(t, c)
	require.Eventually(t, func() bool {
		list, err := c.ScheduleList(t.Context())
		require.NoError(t, err)
		return len(list) == 1 && !list[0].LastTick.IsZero()
	}, 5*time.Second, 10*time.Millisecond, "no tick fired after the stalled one")
	list, err := c.ScheduleList(t.Context())
	require.NoError(t, err)
	require.True(t, list[0].LastTick.After(*d.stalled.Load()))
}

// heldFetch holds a fetch of queue other, once armed, until release is
// closed, telling of it on holding.
type heldFetch struct {
	*fetchLog
	armed   atomic.Bool
	holding chan struct{}
	release chan struct{}
}

func (d *heldFetch) JobFetch(ctx context.Context, p *batondriver.JobFetchParams) (*batondriver.JobFetchResult, error) {
	if p.Queue == "other" && d.armed.CompareAndSwap(true, false) {
		close(d.holding)
		<-d.release
	}
	return d.fetchLog.JobFetch(ctx, p)
}

// A client working two queues unchains a job chained behind one that
// returns when its only free worker is spoken for by a fetch in flight:
// that fetch may bring a job of the other queue for it.
func TestChainYieldsToAFetchInFlight(t *testing.T) {
	t.Parallel()
	d := &heldFetch{fetchLog: &fetchLog{JobDriver: newJobDriver(t), fetched: map[string]int{}},
		holding: make(chan struct{}), release: make(chan struct{})}
	gate, started := make(chan struct{}), make(chan struct{})
	var done atomic.Int32
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(_ context.Context, job *baton.Job[webhookArgs]) error {
		if job.Args.N == 0 {
			close(started)
			<-gate
		}
		done.Add(1)
		return nil
	}), &baton.WorkerOpts{Concurrency: byCustomer(1)})
	baton.AddWorker(workers, baton.WorkFunc[emailArgs](func(context.Context, *baton.Job[emailArgs]) error {
		done.Add(1)
		return nil
	}), nil)
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 2, Logger: quiet,
		Queues: []baton.QueueConfig{{Name: "default"}, {Name: "other"}}, PollInterval: 5 * time.Second})
	require.NoError(t, err)
	insertBacklog(t, c, "a", 2)
	start(t, c)
	<-started
	require.Eventually(t, d.fetchedBoth, 5*time.Second, time.Millisecond)
	var once sync.Once
	free := func() { once.Do(func() { close(d.release) }) }
	t.Cleanup(free) // before Stop, should the test fail
	d.armed.Store(true)
	_, err = c.Insert(t.Context(), emailArgs{}, &baton.InsertOpts{Queue: "other"}) // wakes a round
	require.NoError(t, err)
	<-d.holding // the other worker is spoken for
	close(gate)
	require.Eventually(t, func() bool { return d.unchained.Load() == 1 }, 5*time.Second, time.Millisecond,
		"the chained job ran on the worker a fetch in flight asks a job for")
	free()
	require.Eventually(t, func() bool { return done.Load() == 3 }, 10*time.Second, time.Millisecond)
}

// A chain several leases long keeps its lease without unchaining: the
// heartbeat renews the lease of a chained job that has returned and waits
// for the outcome of the job ahead, the lease the job chained behind it
// starts under; left to run out, that job would go back instead of run.
func TestChainKeepsItsLeaseWhileItsJobsWait(t *testing.T) {
	t.Parallel()
	const leaseTTL = 300 * time.Millisecond
	d := &countingDriver{JobDriver: &slowFinishes{JobDriver: newJobDriver(t), delay: 40 * time.Millisecond}}
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(context.Context, *baton.Job[webhookArgs]) error { return nil }),
		&baton.WorkerOpts{Concurrency: byCustomer(1)})
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 2, LeaseTTL: leaseTTL,
		PollInterval: 50 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	const n = 30 // some 40ms each: four leases
	insertBacklog(t, c, "a", n)
	start(t, c)
	require.Eventually(t, completed(t, c, n), 10*time.Second, 5*time.Millisecond)
	require.Zero(t, d.unchained.Load(), "jobs were unchained: the chain's lease ran out")
}

// lapsingChain renews no lease, and holds the reply of the finish of job
// ahead (after the backend has run it) until the chain's lease is over by
// the worker's reckoning, though within the call's deadline.
type lapsingChain struct {
	batondriver.JobDriver
	leaseTTL  time.Duration
	ahead     string
	fetched   atomic.Pointer[time.Time] // when the fetch that leased it was sent
	held      atomic.Bool
	unchained atomic.Int64
}

func (d *lapsingChain) JobExtend(context.Context, *batondriver.JobExtendParams) (*batondriver.JobExtendResult, error) {
	return nil, errors.New("injected: renewals fail")
}

func (d *lapsingChain) JobFetch(ctx context.Context, p *batondriver.JobFetchParams) (*batondriver.JobFetchResult, error) {
	sent := time.Now()
	res, err := d.JobDriver.JobFetch(ctx, p)
	if err == nil && len(res.Jobs) > 0 {
		d.fetched.CompareAndSwap(nil, &sent)
	}
	return res, err
}

func (d *lapsingChain) JobFinish(ctx context.Context, p *batondriver.JobFinishParams) (*batondriver.JobFinishResult, error) {
	hold := false
	for _, f := range p.Finished {
		if f.Unchain {
			d.unchained.Add(1)
		}
		hold = hold || f.ID == d.ahead && d.held.CompareAndSwap(false, true)
	}
	res, err := d.JobDriver.JobFinish(ctx, p)
	if hold {
		over := d.fetched.Load().Add(d.leaseTTL) // the chain's lease is over by then
		deadline, _ := ctx.Deadline()
		time.Sleep(time.Until(over.Add(deadline.Sub(over) / 2)))
	}
	return res, err
}

// A job chained behind one whose lease is over by the worker's reckoning
// (its renewals failed while it waited for the outcome of the job ahead)
// does not run under that lease: the outcome unchains it.
func TestChainedJobDoesNotStartUnderALapsedLease(t *testing.T) {
	t.Parallel()
	const leaseTTL = time.Second
	d := &lapsingChain{JobDriver: newJobDriver(t), leaseTTL: leaseTTL}
	var lost atomic.Bool
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(ctx context.Context, job *baton.Job[webhookArgs]) error {
		switch job.Args.N {
		case 0:
			time.Sleep(leaseTTL / 2) // its finish goes out half a lease in
		case 2:
			select {
			case <-ctx.Done():
				lost.Store(errors.Is(context.Cause(ctx), baton.ErrLeaseLost))
			case <-time.After(50 * time.Millisecond):
			}
		}
		return nil
	}), &baton.WorkerOpts{Concurrency: byCustomer(1)})
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 2, LeaseTTL: leaseTTL,
		PollInterval: 5 * time.Second, Logger: quiet})
	require.NoError(t, err)
	d.ahead = insertBacklog(t, c, "a", 3)[0]
	start(t, c)
	require.Eventually(t, func() bool { return d.unchained.Load() > 0 || lost.Load() }, 10*time.Second, time.Millisecond)
	require.False(t, lost.Load(), "a chained job ran under a lease that was over")
	require.EqualValues(t, 1, d.unchained.Load())
}

// ticksAt is a schedule firing at the given times, then hourly.
type ticksAt []time.Time

func (s ticksAt) Next(t time.Time) time.Time {
	for _, at := range s {
		if at.After(t) {
			return at
		}
	}
	return t.Add(time.Hour)
}

// lateSearch holds the reply of the search at Start for the schedules'
// registrations (its QueueList, read at once) until a schedule has
// registered, and tells of the queues the client registers in and of
// each tick it inserts.
type lateSearch struct {
	batondriver.JobDriver
	learned    chan struct{} // closed at the client's first registration
	once       sync.Once
	mu         sync.Mutex
	registered []string // the queues, in order
	ticks      chan time.Time
}

func (d *lateSearch) QueueList(ctx context.Context) ([]string, error) {
	queues, err := d.JobDriver.QueueList(ctx)
	select {
	case <-d.learned:
	case <-ctx.Done():
	}
	return queues, err
}

func (d *lateSearch) QueueScheduleRegister(ctx context.Context, p *batondriver.QueueScheduleParams) error {
	d.mu.Lock()
	d.registered = append(d.registered, p.Queue)
	d.mu.Unlock()
	err := d.JobDriver.QueueScheduleRegister(ctx, p)
	d.once.Do(func() { close(d.learned) })
	return err
}

func (d *lateSearch) JobInsert(ctx context.Context, p *batondriver.JobInsertParams) (*batondriver.JobInsertResult, error) {
	res, err := d.JobDriver.JobInsert(ctx, p)
	if p.Once != nil {
		d.ticks <- p.Once.Tick
	}
	return res, err
}

// A schedule whose first tick comes before the search at Start for its
// registration has ended keeps the queue that tick's job went to: the
// registration the search finds, in the queue its jobs have left, does
// not take its place, and is not renewed.
func TestLearnedQueueOutranksFoundRegistration(t *testing.T) {
	t.Parallel()
	d := &lateSearch{JobDriver: newJobDriver(t), learned: make(chan struct{}), ticks: make(chan time.Time, 10)}
	now := time.Now()
	w := baton.NewWorkers()
	baton.AddWorker(w, baton.WorkFunc[emailArgs](noop), nil)
	c, err := baton.NewClient(d, &baton.Config{Workers: w, Logger: quiet, PollInterval: 5 * time.Second,
		PeriodicJobs: []*baton.PeriodicJob{{
			// The search ends just after the first tick, long before the second.
			Name: "tick", Schedule: ticksAt{now.Add(100 * time.Millisecond), now.Add(400 * time.Millisecond)},
			Job: func(time.Time) (baton.JobArgs, *baton.InsertOpts) {
				return emailArgs{}, &baton.InsertOpts{Queue: "new"}
			},
		}},
	})
	require.NoError(t, err)
	ctx := t.Context()
	require.NoError(t, d.JobDriver.QueueScheduleRegister(ctx, &batondriver.QueueScheduleParams{
		Queue: "old", Name: "tick", Kind: "email", TTL: time.Hour,
	}))
	_, err = c.Insert(ctx, emailArgs{}, &baton.InsertOpts{Queue: "old"}) // QueueList lists the queues with jobs
	require.NoError(t, err)
	start(t, c)
	for range 2 { // the search's registration is seen to before the second tick
		select {
		case <-d.ticks:
		case <-time.After(5 * time.Second):
			t.Fatal("the schedule did not fire twice")
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	require.Equal(t, "new", d.registered[0])
	require.NotContains(t, d.registered, "old", "the registration found took the place of the queue learned at the first tick")
}

// losingChained reports the lease of the chained job lost in every renewal
// made once losing is set, as a backend that lost it (a failover to a
// replica that never had it) would, closing twice at the second report;
// the other leases go through.
type losingChained struct {
	batondriver.JobDriver
	chained string
	losing  atomic.Bool
	reports atomic.Int32
	twice   chan struct{}
}

func newLosingChained(t *testing.T) *losingChained {
	return &losingChained{JobDriver: newJobDriver(t), twice: make(chan struct{})}
}

func (d *losingChained) JobExtend(ctx context.Context, p *batondriver.JobExtendParams) (*batondriver.JobExtendResult, error) {
	if !d.losing.Load() {
		return d.JobDriver.JobExtend(ctx, p)
	}
	res := &batondriver.JobExtendResult{Now: time.Now()}
	q := *p
	q.Leases = nil
	for _, l := range p.Leases {
		if l.ID == d.chained {
			res.Lost = append(res.Lost, l.ID)
			continue
		}
		q.Leases = append(q.Leases, l)
	}
	if len(q.Leases) > 0 {
		inner, err := d.JobDriver.JobExtend(ctx, &q)
		if err != nil {
			return nil, err
		}
		res.Lost = append(res.Lost, inner.Lost...)
	}
	if slices.Contains(res.Lost, d.chained) && d.reports.Add(1) == 2 {
		close(d.twice)
	}
	return res, nil
}

// heldReply holds the reply of one driver call, the first it is asked to,
// after the backend has run the call: until release is closed, or else
// until the call's context ends, when the reply is lost as one that came
// too late would be, and cutOff records it. Tests check cutOff to know
// the hold ended as they meant it to, within the caller's deadline.
type heldReply struct {
	held   atomic.Bool
	cutOff atomic.Bool
}

// hold holds res, err as the type says, the first time it is called.
func (h *heldReply) hold(ctx context.Context, release <-chan struct{}, res *batondriver.JobFinishResult, err error) (*batondriver.JobFinishResult, error) {
	if err != nil || !h.held.CompareAndSwap(false, true) {
		return res, err
	}
	select {
	case <-release:
		return res, nil
	case <-ctx.Done():
		h.cutOff.Store(true)
		return nil, ctx.Err()
	}
}

// finishes says whether p records the outcome of job id.
func finishes(p *batondriver.JobFinishParams, id string) bool {
	return slices.ContainsFunc(p.Finished, func(f *batondriver.JobFinish) bool { return f.ID == id })
}

// lostWhileRunning loses the lease of the chained job once it has started,
// and runs the finish of the job ahead at once but holds its reply, within
// the call's deadline, until another job has run.
type lostWhileRunning struct {
	*losingChained
	heldReply
	ahead string
	ran   chan struct{} // closed by the other job's handler
}

func (d *lostWhileRunning) JobFinish(ctx context.Context, p *batondriver.JobFinishParams) (*batondriver.JobFinishResult, error) {
	res, err := d.JobDriver.JobFinish(ctx, p)
	if finishes(p, d.ahead) {
		return d.hold(ctx, d.ran, res, err)
	}
	return res, err
}

// A chained job whose lease is lost while it runs frees its worker as soon
// as it returns: it has no outcome to record, and nothing may start
// behind it, so it does not wait for the finish of the job ahead, which
// may take as long as a call that leases.
func TestLostChainedJobDoesNotWaitForTheJobAhead(t *testing.T) {
	t.Parallel()
	d := &lostWhileRunning{losingChained: newLosingChained(t), ran: make(chan struct{})}
	lost := make(chan error, 1)
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(ctx context.Context, job *baton.Job[webhookArgs]) error {
		if job.Args.N == 1 {
			d.losing.Store(true)
			<-ctx.Done()
			lost <- context.Cause(ctx)
			return ctx.Err()
		}
		return nil
	}), &baton.WorkerOpts{Concurrency: byCustomer(1)})
	baton.AddWorker(workers, baton.WorkFunc[emailArgs](func(context.Context, *baton.Job[emailArgs]) error {
		close(d.ran)
		return nil
	}), nil)
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 1, LeaseTTL: time.Second,
		HeartbeatInterval: 10 * time.Millisecond, PollInterval: 5 * time.Second, Logger: quiet})
	require.NoError(t, err)
	ids := insertBacklog(t, c, "a", 2)
	d.ahead, d.chained = ids[0], ids[1]
	start(t, c)
	select {
	case cause := <-lost:
		require.ErrorIs(t, cause, baton.ErrLeaseLost)
	case <-time.After(5 * time.Second):
		t.Fatal("the chained job's lease was not lost")
	}
	_, err = c.Insert(t.Context(), emailArgs{}, nil) // for the worker, once free
	require.NoError(t, err)
	select {
	case <-d.ran:
	case <-time.After(5 * time.Second):
		t.Fatal("the other job never ran")
	}
	require.True(t, d.held.Load())
	require.False(t, d.cutOff.Load(), "the worker of the chained job whose lease was lost waited for the finish of the job ahead")
}

// lostWhileWaiting runs the finish of the job ahead at once but holds its
// reply, within the call's deadline, until the lease of the job chained
// behind it, which has returned and waits for that reply, has been
// reported lost twice: the first report has then been seen to. It tells
// of a job chained behind that one, and of the recording of its outcome.
type lostWhileWaiting struct {
	*losingChained
	heldReply
	ahead         string
	chainedBehind atomic.Bool
	recorded      chan struct{}
	record        sync.Once
}

func (d *lostWhileWaiting) JobFinish(ctx context.Context, p *batondriver.JobFinishParams) (*batondriver.JobFinishResult, error) {
	res, err := d.JobDriver.JobFinish(ctx, p)
	if err != nil {
		return res, err
	}
	for _, row := range res.Jobs {
		if row.After == d.chained {
			d.chainedBehind.Store(true)
		}
	}
	if finishes(p, d.chained) {
		d.record.Do(func() { close(d.recorded) })
	}
	if finishes(p, d.ahead) {
		return d.hold(ctx, d.twice, res, nil)
	}
	return res, nil
}

// A chained job that has returned, and waits for the finish of the job
// ahead because it may chain the next job behind it, starts no job behind
// it if its lease is reported lost meanwhile: the next job would run
// under the lease lost.
func TestNoJobStartsBehindALeaseLostWhileWaiting(t *testing.T) {
	t.Parallel()
	d := &lostWhileWaiting{losingChained: newLosingChained(t), recorded: make(chan struct{})}
	var ends, third atomic.Int32
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(_ context.Context, job *baton.Job[webhookArgs]) error {
		if job.Args.N == 2 {
			third.Add(1)
		}
		return nil
	}), &baton.WorkerOpts{Concurrency: byCustomer(1)})
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 1, LeaseTTL: 2 * time.Second,
		HeartbeatInterval: 10 * time.Millisecond, PollInterval: 5 * time.Second, Logger: quiet,
		OnJobEnd: func(*baton.JobEvent) {
			if ends.Add(1) == 2 { // the chained job's attempt, its outcome known
				d.losing.Store(true)
			}
		}})
	require.NoError(t, err)
	ids := insertBacklog(t, c, "a", 3)
	d.ahead, d.chained = ids[0], ids[1]
	start(t, c)
	select {
	case <-d.recorded:
	case <-time.After(5 * time.Second):
		t.Fatal("the chained job's outcome was not recorded")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(ctx)) // waits for any job started behind it
	require.True(t, d.held.Load())
	require.False(t, d.cutOff.Load(), "the held reply came after its deadline")
	require.True(t, d.chainedBehind.Load(), "the finish of the job ahead chained no job behind the chained one")
	require.Zero(t, third.Load(), "a job started behind a lease reported lost")
}

// A unique job whose last attempt fails goes dead and frees its unique key
// there: a twin inserted after it conflicts with nothing, not even one
// unique for a period, which would count a claim the dead job kept.
func TestRetriedToDeathReleasesUniqueClaim(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		c, _ := setup(t, baton.WorkFunc[emailArgs](func(context.Context, *baton.Job[emailArgs]) error {
			return errors.New("always")
		}), &baton.Config{Backoff: func(int) time.Duration { return time.Millisecond }})
		start(t, c)
		res, err := c.Insert(t.Context(), emailArgs{To: "a"}, &baton.InsertOpts{MaxAttempts: 2, Unique: &baton.UniqueOpts{}})
		require.NoError(t, err)
		waitState(t, c, "default", res.Job.ID, baton.JobStateDead)
		twin, err := c.Insert(t.Context(), emailArgs{To: "a"}, &baton.InsertOpts{Unique: &baton.UniqueOpts{
			Scope: baton.UniquePeriod, Period: time.Hour, OnConflict: baton.UniqueReject}})
		require.NoError(t, err)
		require.Equal(t, baton.JobInserted, twin.Status)
	})
}

// Deleting a queued unique job through the admin API frees its unique key:
// a job unique while queued that is queued again afterwards (here by a
// snooze) takes the key back, as it does when no twin holds it, and a
// twin inserted then resolves to it.
func TestDeleteReleasesUniqueClaim(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		running, release := make(chan string, 1), make(chan struct{})
		c, _ := setup(t, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
			running <- job.ID
			select {
			case <-release:
				return baton.JobSnooze(time.Hour)
			case <-ctx.Done():
				return ctx.Err()
			}
		}), nil)
		unique := &baton.InsertOpts{Unique: &baton.UniqueOpts{Scope: baton.UniqueQueued,
			Key: func(baton.JobArgs) string { return "k" }}}
		r, err := c.Insert(t.Context(), emailArgs{To: "r"}, unique)
		require.NoError(t, err)
		start(t, c)
		select {
		case id := <-running:
			require.Equal(t, r.Job.ID, id)
		case <-time.After(5 * time.Second):
			t.Fatal("the job did not start")
		}
		// r runs, so holds no claim while queued: a scheduled twin takes
		// the key, and is deleted.
		later := *unique
		later.Delay = time.Hour
		d, err := c.Insert(t.Context(), emailArgs{To: "d"}, &later)
		require.NoError(t, err)
		require.Equal(t, baton.JobInserted, d.Status)
		require.NoError(t, c.JobDelete(t.Context(), "default", d.Job.ID))
		close(release)
		waitState(t, c, "default", r.Job.ID, baton.JobStateScheduled)
		twin, err := c.Insert(t.Context(), emailArgs{To: "e"}, unique)
		require.NoError(t, err)
		require.Equal(t, baton.JobDuplicate, twin.Status)
		require.Equal(t, r.Job.ID, twin.Job.ID, "the snoozed job took the key back")
	})
}
