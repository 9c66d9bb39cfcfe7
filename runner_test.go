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
)

// stalledFinishes holds the first JobFinish that carries each of the
// stall jobs' outcomes for hold, past its caller's deadline (a call slow
// to come back), and fails it without the backend seeing it: so the
// completer's call slots are all taken, one stall job a call. Every other
// call, and every lease renewal, goes through at once.
type stalledFinishes struct {
	batondriver.JobDriver
	hold  time.Duration
	mu    sync.Mutex
	stall map[string]int // stall job ID -> its place, until its finish is held
	gates [5]chan struct{}
}

func (d *stalledFinishes) JobFinish(ctx context.Context, p *batondriver.JobFinishParams) (*batondriver.JobFinishResult, error) {
	d.mu.Lock()
	stall := -1
	for _, f := range p.Finished {
		if i, ok := d.stall[f.ID]; ok {
			stall = i
			delete(d.stall, f.ID)
		}
	}
	d.mu.Unlock()
	if stall >= 0 {
		close(d.gates[stall+1])
		time.Sleep(d.hold)
		return nil, errors.New("injected: the call never reached the backend")
	}
	return d.JobDriver.JobFinish(ctx, p)
}

// A job's lease is renewed until its outcome is recorded, not only while
// its handler runs: an outcome that waits for the completer (its call
// slots all taken by slow calls), or rides in a call that fails and is
// retried, for longer than LeaseTTL must not let the lease lapse, or the
// job is taken back and runs again although its handler succeeded, and
// its outcome is ignored as stale.
func TestLeaseRenewedUntilOutcomeRecorded(t *testing.T) {
	t.Parallel()
	const leaseTTL = 300 * time.Millisecond
	d := &stalledFinishes{JobDriver: batonmem.New(), hold: 2 * leaseTTL, stall: map[string]int{}}
	for i := range d.gates {
		d.gates[i] = make(chan struct{})
	}
	close(d.gates[0])
	var mu sync.Mutex
	runs := map[string]int{}
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[emailArgs](func(_ context.Context, job *baton.Job[emailArgs]) error {
		mu.Lock()
		runs[job.ID]++
		mu.Unlock()
		if job.Args.To == "queued" {
			<-d.gates[4] // every call slot taken: its outcome waits
			return nil
		}
		var i int
		_, err := fmt.Sscanf(job.Args.To, "stall%d", &i)
		require.NoError(t, err)
		<-d.gates[i] // each stall job's finish in a call of its own
		return nil
	}), nil)
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 5, LeaseTTL: leaseTTL,
		PollInterval: 20 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	var ids []string
	for i := range 4 {
		res, err := c.Insert(t.Context(), emailArgs{To: fmt.Sprintf("stall%d", i)}, nil)
		require.NoError(t, err)
		d.stall[res.Job.ID] = i
		ids = append(ids, res.Job.ID)
	}
	res, err := c.Insert(t.Context(), emailArgs{To: "queued"}, nil)
	require.NoError(t, err)
	queued := res.Job.ID
	ids = append(ids, queued)
	start(t, c)
	require.Eventually(t, completed(t, c, len(ids)), 10*time.Second, 5*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	got, want := map[string][2]int{}, map[string][2]int{}
	for i, id := range ids {
		row, err := c.JobGet(t.Context(), "default", id)
		require.NoError(t, err)
		name := fmt.Sprintf("stall%d", i) // its finish held, then retried
		if id == queued {
			name = "queued" // its outcome waited for the completer
		}
		got[name], want[name] = [2]int{runs[id], row.Attempt}, [2]int{1, 1}
	}
	require.Equal(t, want, got, "runs and attempts of each job: a lease lapsed before its outcome was recorded")
}

// chainLosingDriver holds the first renewal that carries the lease of the
// job ahead until release is closed, then reports it lost, as a backend
// that lost the chain's lease (a failover to a replica that never had it)
// would; from then on it reports the leases of both jobs lost.
type chainLosingDriver struct {
	batondriver.JobDriver
	ahead, chained string
	held           chan struct{}
	release        chan struct{}
	reported       chan time.Time // when the held renewal came back
	once           sync.Once
	lost           atomic.Bool
}

func (d *chainLosingDriver) JobExtend(ctx context.Context, p *batondriver.JobExtendParams) (*batondriver.JobExtendResult, error) {
	res := &batondriver.JobExtendResult{Now: time.Now()}
	q := *p
	q.Leases = nil
	hold := false
	for _, l := range p.Leases {
		switch {
		case l.ID == d.ahead && !d.lost.Load():
			d.once.Do(func() { hold = true })
			res.Lost = append(res.Lost, l.ID)
		case (l.ID == d.ahead || l.ID == d.chained) && d.lost.Load():
			res.Lost = append(res.Lost, l.ID)
		default:
			q.Leases = append(q.Leases, l)
		}
	}
	if hold {
		close(d.held)
		<-d.release
		d.lost.Store(true)
		defer func() { d.reported <- time.Now() }()
	}
	if len(q.Leases) > 0 {
		inner, err := d.JobDriver.JobExtend(ctx, &q)
		if err != nil {
			return nil, err
		}
		res.Lost = append(res.Lost, inner.Lost...)
	}
	return res, nil
}

// A renewal that reports the lease of a job lost after the job chained
// behind it has started under that lease, the job ahead having returned
// while the renewal was on its way, stops the chained job at once, not
// one heartbeat later: its key's slot is free on the backend, and the job
// itself back at the head of its parked jobs, to run elsewhere.
func TestLostLeaseReachesTheJobChainedBehind(t *testing.T) {
	t.Parallel()
	const heartbeat = time.Second
	counted := &countingDriver{JobDriver: batonmem.New()}
	d := &chainLosingDriver{JobDriver: counted, held: make(chan struct{}), release: make(chan struct{}),
		reported: make(chan time.Time, 1)}
	chainedStarted := make(chan struct{})
	stopped := make(chan error, 1)
	var stoppedAt atomic.Pointer[time.Time]
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(ctx context.Context, job *baton.Job[webhookArgs]) error {
		if job.Args.N == 0 {
			<-d.held // the heartbeat's renewal of this lease is on its way
			return nil
		}
		if job.Attempt == 1 {
			close(chainedStarted)
			select {
			case <-ctx.Done():
				now := time.Now()
				stoppedAt.Store(&now)
				stopped <- context.Cause(ctx)
			case <-time.After(5 * heartbeat):
				stopped <- errors.New("never cancelled")
			}
		}
		return nil
	}), &baton.WorkerOpts{Concurrency: byCustomer(1)})
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 2, LeaseTTL: 4 * heartbeat,
		HeartbeatInterval: heartbeat, PollInterval: 5 * time.Second, Logger: quiet})
	require.NoError(t, err)
	ids := insertBacklog(t, c, "a", 2)
	d.ahead, d.chained = ids[0], ids[1]
	start(t, c)
	select {
	case <-chainedStarted:
	case <-time.After(5 * heartbeat):
		t.Fatal("the chained job did not start")
	}
	require.EqualValues(t, 1, counted.chained.Load(), "the second job was not chained behind the first")
	close(d.release)
	reported := <-d.reported
	require.ErrorIs(t, <-stopped, baton.ErrLeaseLost)
	late := stoppedAt.Load().Sub(reported)
	t.Logf("the chained job stopped %v after the lease was reported lost", late)
	require.Less(t, late, heartbeat/3, "the chained job ran on under the lost lease until the next heartbeat")
}

// lapsingOutcome lets the lease of job id lapse while its first outcome
// is held in a finish call: its renewals are left out of the calls until
// the job runs a second time, and that finish comes back (through the
// backend, which finds it stale) only when release is closed.
type lapsingOutcome struct {
	batondriver.JobDriver
	id      string
	again   atomic.Bool // the second execution started
	held    chan struct{}
	release chan struct{}
	once    sync.Once
}

func (d *lapsingOutcome) JobExtend(ctx context.Context, p *batondriver.JobExtendParams) (*batondriver.JobExtendResult, error) {
	if !d.again.Load() {
		q := *p
		q.Leases = nil
		for _, l := range p.Leases {
			if l.ID != d.id {
				q.Leases = append(q.Leases, l)
			}
		}
		p = &q
	}
	return d.JobDriver.JobExtend(ctx, p)
}

func (d *lapsingOutcome) JobFinish(ctx context.Context, p *batondriver.JobFinishParams) (*batondriver.JobFinishResult, error) {
	for _, f := range p.Finished {
		if f.ID == d.id {
			hold := false
			d.once.Do(func() { hold = true })
			if hold {
				close(d.held)
				<-d.release
			}
		}
	}
	return d.JobDriver.JobFinish(ctx, p)
}

// An outcome waiting to be recorded, whose lease lapsed and whose job this
// process then leased and runs again, is no longer renewed: its lease is
// reported lost by the job's ID, which must not cancel the new execution.
func TestStaleOutcomeLeavesTheJobsNewExecutionAlone(t *testing.T) {
	t.Parallel()
	const leaseTTL = 200 * time.Millisecond
	d := &lapsingOutcome{JobDriver: batonmem.New(), held: make(chan struct{}), release: make(chan struct{})}
	second := make(chan error, 1)
	workers := baton.NewWorkers()
	var runs atomic.Int32
	baton.AddWorker(workers, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
		if runs.Add(1) == 1 {
			return nil // its outcome is held; its lease lapses meanwhile
		}
		d.again.Store(true)
		select { // three heartbeats and more, renewing the old lease too
		case <-ctx.Done():
			second <- context.Cause(ctx)
		case <-time.After(2 * leaseTTL):
			second <- nil
		}
		close(d.release)
		return nil
	}), nil)
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 2, LeaseTTL: leaseTTL,
		PollInterval: 10 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	res, err := c.Insert(t.Context(), emailArgs{To: "lapse"}, nil)
	require.NoError(t, err)
	d.id = res.Job.ID
	start(t, c)
	select {
	case err := <-second:
		require.NoError(t, err, "the second execution was cancelled")
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not run again")
	}
	require.Eventually(t, completed(t, c, 1), 10*time.Second, 5*time.Millisecond)
}

// stuckQueues never answers a renewal for the queues in stuck until the
// call's context ends, as a Cluster node that is down would not.
type stuckQueues struct {
	batondriver.JobDriver
	stuck map[string]bool
}

func (d *stuckQueues) JobExtend(ctx context.Context, p *batondriver.JobExtendParams) (*batondriver.JobExtendResult, error) {
	if d.stuck[p.Queue] {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return d.JobDriver.JobExtend(ctx, p)
}

// Queues whose renewals hang do not make another queue's late: each call
// may take up to LeaseTTL/3, and three of them one after the other would
// let the healthy queue's leases lapse.
func TestRenewalsOfStuckQueuesDelayNoOther(t *testing.T) {
	t.Parallel()
	const leaseTTL = 300 * time.Millisecond
	stuck := map[string]bool{"down1": true, "down2": true, "down3": true}
	d := &stuckQueues{JobDriver: batonmem.New(), stuck: stuck}
	done := make(chan error, 1)
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
		if job.Queue != "up" {
			<-ctx.Done() // their leases lapse: they give up
			return ctx.Err()
		}
		select {
		case <-ctx.Done():
			done <- context.Cause(ctx)
		case <-time.After(4 * leaseTTL):
			done <- nil
		}
		return nil
	}), nil)
	queues := []baton.QueueConfig{{Name: "down1"}, {Name: "down2"}, {Name: "down3"}, {Name: "up"}}
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, Queues: queues, Concurrency: 8,
		LeaseTTL: leaseTTL, PollInterval: 10 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	for _, q := range queues {
		_, err := c.Insert(t.Context(), emailArgs{To: q.Name}, &baton.InsertOpts{Queue: q.Name})
		require.NoError(t, err)
	}
	start(t, c)
	select {
	case err := <-done:
		require.NoError(t, err, "the healthy queue's job lost its lease")
	case <-time.After(10 * time.Second):
		t.Fatal("the healthy queue's job never ended")
	}
}

// delays records the RunAt and Delay of every insert and outcome.
type delays struct {
	batondriver.JobDriver
	mu   sync.Mutex
	seen map[string][2]any // by args ("insert") or error text: {RunAt, Delay}
}

func (d *delays) JobInsert(ctx context.Context, p *batondriver.JobInsertParams) (*batondriver.JobInsertResult, error) {
	d.mu.Lock()
	for _, j := range p.Jobs {
		d.seen["insert "+string(j.Args)] = [2]any{j.RunAt, j.Delay}
	}
	d.mu.Unlock()
	return d.JobDriver.JobInsert(ctx, p)
}

func (d *delays) JobFinish(ctx context.Context, p *batondriver.JobFinishParams) (*batondriver.JobFinishResult, error) {
	d.mu.Lock()
	for _, f := range p.Finished {
		d.seen[string(f.Outcome)] = [2]any{f.RunAt, f.Delay}
	}
	d.mu.Unlock()
	return d.JobDriver.JobFinish(ctx, p)
}

// Relative times go to the backend as delays, to be counted on its clock:
// an insert's Delay, a retry's backoff, a snooze, JobAgainIn.
func TestRelativeTimesAreDelaysOnTheBackendsClock(t *testing.T) {
	t.Parallel()
	d := &delays{JobDriver: batonmem.New(), seen: map[string][2]any{}}
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[emailArgs](func(_ context.Context, job *baton.Job[emailArgs]) error {
		switch job.Args.To {
		case "snooze":
			return baton.JobSnooze(2 * time.Hour)
		case "again":
			return baton.JobAgainIn(4 * time.Hour)
		}
		return errors.New("boom")
	}), nil)
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, Logger: quiet,
		Backoff: func(int) time.Duration { return 3 * time.Hour }})
	require.NoError(t, err)
	for _, to := range []string{"snooze", "again", "retry"} {
		_, err := c.Insert(t.Context(), emailArgs{To: to}, nil)
		require.NoError(t, err)
	}
	_, err = c.Insert(t.Context(), emailArgs{To: "later"}, &baton.InsertOpts{Delay: time.Hour})
	require.NoError(t, err)
	start(t, c)
	want := map[string][2]any{
		`insert {"to":"later"}`: {time.Time{}, time.Hour},
		"snooze":                {time.Time{}, 2 * time.Hour},
		"again":                 {time.Time{}, 4 * time.Hour},
		"retry":                 {time.Time{}, 3 * time.Hour},
	}
	require.Eventually(t, func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		for k := range want {
			if _, ok := d.seen[k]; !ok {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond)
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, w := range want {
		require.Equal(t, w, d.seen[k], k)
	}
}

// refusingFinish refuses every outcome of job id as bad parameters.
type refusingFinish struct {
	batondriver.JobDriver
	id      atomic.Value // string
	refused atomic.Int32
}

func (d *refusingFinish) JobFinish(ctx context.Context, p *batondriver.JobFinishParams) (*batondriver.JobFinishResult, error) {
	for _, f := range p.Finished {
		if f.ID == d.id.Load() {
			d.refused.Add(1)
			return nil, fmt.Errorf("%w: refused for the test", batondriver.ErrBadParams)
		}
	}
	return d.JobDriver.JobFinish(ctx, p)
}

// An outcome the backend refuses as bad parameters is not retried for
// ever with its lease renewed meanwhile (the job would stay running, its
// key slot held): it is given up, the lease lapses, and the job runs again.
func TestRefusedOutcomeLetsTheLeaseLapse(t *testing.T) {
	t.Parallel()
	const leaseTTL = 200 * time.Millisecond
	d := &refusingFinish{JobDriver: batonmem.New()}
	d.id.Store("")
	var runs atomic.Int32
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[emailArgs](func(context.Context, *baton.Job[emailArgs]) error {
		runs.Add(1)
		return nil
	}), nil)
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, LeaseTTL: leaseTTL,
		PollInterval: 10 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	res, err := c.Insert(t.Context(), emailArgs{To: "refused"}, nil)
	require.NoError(t, err)
	d.id.Store(res.Job.ID)
	start(t, c)
	require.Eventually(t, func() bool { return runs.Load() >= 2 }, 10*time.Second, 5*time.Millisecond,
		"the job never ran again")
	require.LessOrEqual(t, int(d.refused.Load()), int(runs.Load())+1, "a refused outcome was retried")
}
