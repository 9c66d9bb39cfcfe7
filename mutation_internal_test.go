package baton

// White-box tests written to kill mutants of the group commit of inserts
// and of launch that the other tests let survive.

import (
	"context"
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
