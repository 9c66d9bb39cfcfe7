package baton

// White-box tests written to kill mutants of the group commit of inserts,
// of launch and of the completer that the other tests let survive.

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
)

// deadlineOf records the deadline of each insert call's context.
type deadlineOf struct {
	batondriver.JobDriver
	deadlines chan time.Time
}

func (d *deadlineOf) JobInsert(ctx context.Context, p *batondriver.JobInsertParams) (*batondriver.JobInsertResult, error) {
	dl, _ := ctx.Deadline()
	d.deadlines <- dl
	return d.JobDriver.JobInsert(ctx, p)
}

// handedOn is a group of the given callers' jobs whose turn has come
// (handOn), with maxInflight calls counted in flight.
func handedOn(t *testing.T, c *Client, ctxs ...context.Context) (*queueInserter, *insertGroup) {
	t.Helper()
	turn := make(chan struct{})
	close(turn)
	g := &insertGroup{turn: turn, sending: true, done: make(chan struct{})}
	for i, ctx := range ctxs {
		_, ins, err := c.prepare(&InsertManyParams{Args: groupArgs{N: i + 1}}, time.Now())
		require.NoError(t, err)
		g.members = append(g.members, groupMember{job: ins, ctx: ctx})
	}
	qi := c.queueInserter("default")
	qi.inflight, qi.next = maxInflight, g
	return qi, g
}

// A group's call is bounded by the latest deadline of its callers, not
// the earliest: the caller whose deadline comes first gives up then, the
// others' jobs are inserted all the same.
func TestInsertGroupBoundByTheLatestDeadline(t *testing.T) {
	t.Parallel()
	d := &deadlineOf{JobDriver: batonmem.New(), deadlines: make(chan time.Time, 1)}
	c, err := NewClient(d, &Config{AllowUnknownKinds: true})
	require.NoError(t, err)
	soon, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	late, cancel2 := context.WithTimeout(context.Background(), 2*time.Hour)
	defer cancel2()
	qi, g := handedOn(t, c, soon, late)
	c.sendGroup(context.Background(), qi, "default", g)
	require.NoError(t, g.err)
	want, _ := late.Deadline()
	require.Equal(t, want, <-d.deadlines, "the group's call was not bounded by the latest deadline")
}

// deadlinePassed is a context whose deadline has passed though it has not
// ended yet: its timer has yet to fire.
type deadlinePassed struct {
	context.Context
	d time.Time
}

func (c deadlinePassed) Deadline() (time.Time, bool) { return c.d, true }

// A group's send leaves out the job of a caller whose deadline has passed
// though its context has not ended yet: that caller is about to get its
// context's error, which must mean that its job was not inserted.
func TestInsertGroupLeavesOutJobOfDeadlinePassed(t *testing.T) {
	t.Parallel()
	c, err := NewClient(batonmem.New(), &Config{AllowUnknownKinds: true})
	require.NoError(t, err)
	passed := deadlinePassed{Context: context.Background(), d: time.Now().Add(-time.Millisecond)}
	qi, g := handedOn(t, c, passed, context.Background())
	c.sendGroup(context.Background(), qi, "default", g)
	require.NoError(t, g.err)
	require.True(t, g.members[0].gone)
	require.JSONEq(t, `{"n":2}`, string(g.results[1].Job.Args))
	jobs, total, err := c.JobList(context.Background(), "default", JobStateAvailable, nil)
	require.NoError(t, err)
	require.Equal(t, 1, total, "the job of a caller whose deadline had passed was sent: %+v", jobs)
}

// heldInserts tells of each insert call, then holds it until open is
// closed.
type heldInserts struct {
	batondriver.JobDriver
	arrived chan struct{}
	open    chan struct{}
}

func (d *heldInserts) JobInsert(ctx context.Context, p *batondriver.JobInsertParams) (*batondriver.JobInsertResult, error) {
	d.arrived <- struct{}{}
	<-d.open
	return d.JobDriver.JobInsert(ctx, p)
}

// An insert that comes while a group's call is in flight forms the next
// group: it does not join the group sent, whose jobs were taken, and its
// own job is inserted.
func TestInsertAfterAGroupWasSentFormsTheNext(t *testing.T) {
	t.Parallel()
	d := &heldInserts{JobDriver: batonmem.New(), arrived: make(chan struct{}, 4), open: make(chan struct{})}
	c, err := NewClient(d, &Config{AllowUnknownKinds: true})
	require.NoError(t, err)
	qi, g := handedOn(t, c, context.Background())
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		c.sendGroup(context.Background(), qi, "default", g)
	}()
	<-d.arrived // the group's call is in flight, maxInflight in all
	res := make(chan *InsertResult, 1)
	go func() {
		r, err := c.Insert(context.Background(), groupArgs{N: 2}, nil)
		require.NoError(t, err)
		res <- r
	}()
	joined := false
	require.Eventually(t, func() bool {
		qi.mu.Lock()
		defer qi.mu.Unlock()
		joined = len(g.members) > 1
		return joined || qi.next != nil && len(qi.next.members) == 1
	}, 5*time.Second, time.Millisecond)
	close(d.open)
	<-sent
	require.False(t, joined, "an insert joined a group already sent")
	r := <-res
	require.JSONEq(t, `{"n":2}`, string(r.Job.Args))
	_, total, err := c.JobList(context.Background(), "default", JobStateAvailable, nil)
	require.NoError(t, err)
	require.Equal(t, 2, total)
}

// Only one job may be chained behind a lease: a second chained behind the
// same execution goes back, rather than take the first one's place and
// leave that one on nobody's worker until its lease expires.
func TestLaunchChainsOneJobBehindALease(t *testing.T) {
	t.Parallel()
	r := &runner{cfg: &config{Config: Config{LeaseTTL: time.Second}}, running: map[execKey]*execution{}}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	ahead := &execution{queue: "q", row: &JobRow{ID: "a", Fence: 20, Lease: "la"}, ctx: ctx, cancel: cancel}
	r.running[execKey{"q", "a"}] = ahead
	first := &JobRow{ID: "b", After: "a", Fence: 21, Lease: "lb"}
	second := &JobRow{ID: "c", After: "a", Fence: 22, Lease: "lc"}
	started, back := r.launch("q", []*JobRow{first, second}, time.Now(), true)
	require.Zero(t, started)
	require.Same(t, first, ahead.next)
	require.Len(t, back, 1)
	require.Equal(t, "c", back[0].ID)
	require.Equal(t, "lc", back[0].Lease)
	require.True(t, back[0].GiveBack)
}

// stallArgs is a job whose handler waits for gates[N] of its congestion.
type stallArgs struct {
	N int `json:"n"`
}

func (stallArgs) Kind() string { return "stall" }

// congestion takes the completer's call slots, all maxFinishing of them:
// it holds the first finish of each of the stall jobs until release is
// closed, then fails it without the backend seeing it (its retry records
// the outcome, and leases nothing). Each stall job's handler waits until
// the finish before its own is held, so that each finish is a call of its
// own; outcomes that come once all are held wait for the completer in
// runner.finishes. It keeps the params of every other finish.
type congestion struct {
	batondriver.JobDriver
	mu       sync.Mutex
	stall    map[string]int                  // stall job ID -> its place, until its finish is held
	gates    [maxFinishing + 1]chan struct{} // gates[i] is closed once i finishes are held
	release  chan struct{}
	finishes []*batondriver.JobFinishParams
}

func (d *congestion) JobFinish(ctx context.Context, p *batondriver.JobFinishParams) (*batondriver.JobFinishResult, error) {
	d.mu.Lock()
	stall := -1
	for _, f := range p.Finished {
		if i, ok := d.stall[f.ID]; ok {
			stall = i
			delete(d.stall, f.ID)
		}
	}
	if stall < 0 {
		d.finishes = append(d.finishes, p)
	}
	d.mu.Unlock()
	if stall >= 0 {
		close(d.gates[stall+1])
		select {
		case <-d.release:
			return nil, errors.New("injected: the call never reached the backend")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return d.JobDriver.JobFinish(ctx, p)
}

// finishOf returns the params of the finish that carried job id's outcome.
func (d *congestion) finishOf(t *testing.T, id string) *batondriver.JobFinishParams {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.finishes {
		if slices.ContainsFunc(p.Finished, func(f *batondriver.JobFinish) bool { return f.ID == id }) {
			return p
		}
	}
	require.Failf(t, "no finish carried the job's outcome", "job %s", id)
	return nil
}

// congestedClient returns a client of one queue on a congestion, with
// maxFinishing+1 workers, stall jobs 0 to maxFinishing-1 inserted and the
// workers of add registered: the test inserts the jobs of its last worker,
// which wait for gates[maxFinishing].
func congestedClient(t *testing.T, add func(*Workers, *congestion)) (*Client, *congestion) {
	t.Helper()
	d := &congestion{JobDriver: batonmem.New(), stall: map[string]int{}, release: make(chan struct{})}
	for i := range d.gates {
		d.gates[i] = make(chan struct{})
	}
	close(d.gates[0])
	w := NewWorkers()
	AddWorker(w, WorkFunc[stallArgs](func(ctx context.Context, job *Job[stallArgs]) error {
		select {
		case <-d.gates[job.Args.N]:
		case <-ctx.Done(): // the test failed: Stop cuts it off
		}
		return nil
	}), nil)
	if add != nil {
		add(w, d)
	}
	c, err := NewClient(d, &Config{Workers: w, Concurrency: maxFinishing + 1, PollInterval: 5 * time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	for i := range maxFinishing {
		res, err := c.Insert(t.Context(), stallArgs{N: i}, nil)
		require.NoError(t, err)
		d.stall[res.Job.ID] = i
	}
	return c, d
}

// stopCongested starts c, waits until an outcome waits for the completer,
// whose call slots are all taken, then stops c, and lets the held calls
// return once Stop has begun: the completer makes that outcome's finish
// after Stop began.
func stopCongested(t *testing.T, c *Client, d *congestion) {
	t.Helper()
	var once sync.Once
	release := func() { once.Do(func() { close(d.release) }) }
	t.Cleanup(func() { // should the test fail before Stop
		release()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	require.NoError(t, c.Start(context.Background()))
	c.mu.Lock()
	r := c.runner
	c.mu.Unlock()
	require.Eventually(t, func() bool {
		select {
		case <-d.gates[maxFinishing]: // the stall jobs' outcomes are all in held calls
			return len(r.finishes) == 1
		default:
			return false
		}
	}, 5*time.Second, time.Millisecond)
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stopped <- c.Stop(ctx)
	}()
	require.Eventually(t, func() bool { return r.fetchCtx.Err() != nil }, 5*time.Second, time.Millisecond)
	release()
	require.NoError(t, <-stopped)
}

// An outcome whose worker was handed to the completer, to lease the
// worker's next job in the same call, asks for no job if its finish is
// made once Stop has begun: the completer was congested meanwhile, and a
// job leased now would only go back.
func TestFinishMadeAfterStopBeganLeasesNothing(t *testing.T) {
	t.Parallel()
	c, d := congestedClient(t, nil)
	res, err := c.Insert(t.Context(), stallArgs{N: maxFinishing}, nil)
	require.NoError(t, err)
	stopCongested(t, c, d)
	require.Nil(t, d.finishOf(t, res.Job.ID).Fetch, "a finish made after Stop began asked to lease")
}

// chainArgs are jobs of one key of limit 1: a backlog of them chains.
type chainArgs struct {
	N int `json:"n"`
}

func (chainArgs) Kind() string { return "chain" }

// The finish of a job ahead, whose chained job runs already, asks to chain
// no job behind that one if it is made once Stop has begun: the completer
// was congested meanwhile, and a job chained now would only go back.
func TestFinishMadeAfterStopBeganChainsNothing(t *testing.T) {
	t.Parallel()
	var ran [3]atomic.Int32
	c, d := congestedClient(t, func(w *Workers, d *congestion) {
		AddWorker(w, WorkFunc[chainArgs](func(ctx context.Context, job *Job[chainArgs]) error {
			ran[job.Args.N].Add(1)
			if job.Args.N == 0 {
				select {
				case <-d.gates[maxFinishing]:
				case <-ctx.Done():
				}
			}
			return nil
		}), &WorkerOpts{Concurrency: &ConcurrencyOpts{Key: KeyOf(func(chainArgs) string { return "k" }), Limit: 1}})
	})
	var ids []string
	for i := range 3 { // the second is chained behind the first
		res, err := c.Insert(t.Context(), chainArgs{N: i}, nil)
		require.NoError(t, err)
		ids = append(ids, res.Job.ID)
	}
	stopCongested(t, c, d)
	require.EqualValues(t, 1, ran[1].Load(), "the second job did not run chained behind the first")
	require.False(t, d.finishOf(t, ids[0]).Chain, "a finish made after Stop began asked to chain")
	require.Zero(t, ran[2].Load())
	third, err := c.JobGet(t.Context(), "default", ids[2])
	require.NoError(t, err)
	require.Equal(t, JobStateAvailable, third.State)
	require.True(t, third.AttemptedAt.IsZero(), "the third job was leased")
}

// heldFinish holds the first finish that carries job id's outcome until
// open is closed, telling of it on arrived, and keeps the jobs it leased.
type heldFinish struct {
	batondriver.JobDriver
	mu      sync.Mutex
	id      string
	arrived chan struct{}
	open    chan struct{}
	leased  []*JobRow
}

func (d *heldFinish) JobFinish(ctx context.Context, p *batondriver.JobFinishParams) (*batondriver.JobFinishResult, error) {
	d.mu.Lock()
	hold := d.id != "" && slices.ContainsFunc(p.Finished, func(f *batondriver.JobFinish) bool { return f.ID == d.id })
	if hold {
		d.id = ""
	}
	d.mu.Unlock()
	if hold {
		close(d.arrived)
		select {
		case <-d.open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	res, err := d.JobDriver.JobFinish(ctx, p)
	if hold && err == nil {
		d.mu.Lock()
		d.leased = res.Jobs
		d.mu.Unlock()
	}
	return res, err
}

// A job chained by a finish whose reply comes once Stop has begun goes
// back to the head of its key's parked jobs at once, while the job it is
// chained behind still runs: Stop starts no job, and waits for that one.
// Key k of limit 1 has jobs 0, 1 and 2: 1 is chained behind 0 and runs
// once 0 returns, while 0's finish, held, chains 2 behind 1.
func TestChainedAfterStopBeganGoesBackAtOnce(t *testing.T) {
	t.Parallel()
	d := &heldFinish{JobDriver: batonmem.New(), arrived: make(chan struct{}), open: make(chan struct{})}
	began := make(chan struct{})
	release := make(chan struct{})
	var ran [3]atomic.Int32
	w := NewWorkers()
	AddWorker(w, WorkFunc[chainArgs](func(ctx context.Context, job *Job[chainArgs]) error {
		ran[job.Args.N].Add(1)
		if job.Args.N == 1 {
			close(began)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	}), &WorkerOpts{Concurrency: &ConcurrencyOpts{Key: KeyOf(func(chainArgs) string { return "k" }), Limit: 1}})
	c, err := NewClient(d, &Config{Workers: w, Concurrency: 2, PollInterval: 5 * time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	var ids []string
	for i := range 3 {
		res, err := c.Insert(t.Context(), chainArgs{N: i}, nil)
		require.NoError(t, err)
		ids = append(ids, res.Job.ID)
	}
	d.id = ids[0]
	openHeld := sync.OnceFunc(func() { close(d.open) })
	releaseSecond := sync.OnceFunc(func() { close(release) })
	t.Cleanup(func() { // should the test fail before the end
		openHeld()
		releaseSecond()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})

	require.NoError(t, c.Start(context.Background()))
	c.mu.Lock()
	r := c.runner
	c.mu.Unlock()
	<-d.arrived // 0 returned; its finish, asking to chain, is held
	<-began     // 1 runs, chained behind 0
	r.mu.Lock()
	second := r.running[execKey{"default", ids[1]}]
	r.mu.Unlock()
	require.NotNil(t, second)
	require.NotNil(t, second.chainDone, "1 did not start chained")

	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stopped <- c.Stop(ctx)
	}()
	require.Eventually(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.stopping
	}, 5*time.Second, time.Millisecond)
	openHeld()
	<-second.chainDone // 0's finish has returned, and what it launched is settled
	d.mu.Lock()
	leased := d.leased
	d.mu.Unlock()
	require.Len(t, leased, 1, "0's finish chained no job")
	require.Equal(t, []string{ids[2], ids[1]}, []string{leased[0].ID, leased[0].After}, "0's finish chained 2 behind 1")
	third, err := c.JobGet(t.Context(), "default", ids[2])
	require.NoError(t, err)
	require.Equal(t, JobStateParked, third.State, "2, chained once Stop had begun, was not given back at once")
	require.Empty(t, third.After)
	require.Zero(t, third.Attempt)

	releaseSecond()
	require.NoError(t, <-stopped)
	require.EqualValues(t, []int32{1, 1, 0}, []int32{ran[0].Load(), ran[1].Load(), ran[2].Load()})
	third, err = c.JobGet(t.Context(), "default", ids[2])
	require.NoError(t, err)
	require.Equal(t, JobStateAvailable, third.State, "2 takes the slot 1 freed")
}
