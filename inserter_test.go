package baton

// White-box tests of the group commit of single inserts: they wait for a
// group to hold given jobs, which no caller can see.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
)

type groupArgs struct {
	N int `json:"n"`
}

func (groupArgs) Kind() string { return "group" }

// gatedInserts holds every JobInsert until open is closed, and, as a
// network client does, fails one whose context has ended.
type gatedInserts struct {
	batondriver.JobDriver
	open chan struct{}
}

func (d *gatedInserts) JobInsert(ctx context.Context, p *batondriver.JobInsertParams) (*batondriver.JobInsertResult, error) {
	select {
	case <-d.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return d.JobDriver.JobInsert(ctx, p)
}

// setupGroup returns a client whose inserts wait for open, with
// maxInflight of them in flight, so that the next ones are grouped.
func setupGroup(t *testing.T) (*Client, *gatedInserts, *sync.WaitGroup) {
	t.Helper()
	t.Parallel()
	d := &gatedInserts{JobDriver: batonmem.New(), open: make(chan struct{})}
	c, err := NewClient(d, &Config{AllowUnknownKinds: true})
	require.NoError(t, err)
	var inflight sync.WaitGroup
	for i := range maxInflight {
		inflight.Go(func() {
			_, err := c.Insert(context.Background(), groupArgs{N: 100 + i}, nil)
			require.NoError(t, err)
		})
	}
	qi := c.queueInserter("default")
	require.Eventually(t, func() bool {
		qi.mu.Lock()
		defer qi.mu.Unlock()
		return qi.inflight == maxInflight
	}, 5*time.Second, time.Millisecond)
	return c, d, &inflight
}

// waitGrouped waits until the queue's next group holds n jobs.
func waitGrouped(t *testing.T, c *Client, n int) {
	t.Helper()
	qi := c.queueInserter("default")
	require.Eventually(t, func() bool {
		qi.mu.Lock()
		defer qi.mu.Unlock()
		return qi.next != nil && len(qi.next.members) == n
	}, 5*time.Second, time.Millisecond)
}

// A grouped insert's call is not bounded by the deadline of whichever
// caller happened to come first: a caller without a deadline gets its job
// inserted though the first one's deadline passed before the group's turn.
func TestInsertGroupNotBoundByAnothersDeadline(t *testing.T) {
	c, d, inflight := setupGroup(t)
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, err := c.Insert(short, groupArgs{N: 1}, nil)
		first <- err
	}()
	waitGrouped(t, c, 1)
	second := make(chan error, 1)
	go func() {
		_, err := c.Insert(context.Background(), groupArgs{N: 2}, nil)
		second <- err
	}()
	waitGrouped(t, c, 2)
	require.ErrorIs(t, <-first, context.DeadlineExceeded)
	close(d.open)
	inflight.Wait()
	require.NoError(t, <-second, "the first caller's deadline failed the second caller's insert")
}

// A caller whose context ends before its group is sent gets an error and
// its job is not inserted: nothing was sent for it, so an error must mean
// that (a caller that retries does not insert its job twice). The group
// goes on for the others.
func TestInsertGroupDropsJobOfCallerGone(t *testing.T) {
	c, d, inflight := setupGroup(t)
	gone, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := c.Insert(gone, groupArgs{N: 1}, nil)
		first <- err
	}()
	waitGrouped(t, c, 1)
	second := make(chan *InsertResult, 1)
	go func() {
		res, err := c.Insert(context.Background(), groupArgs{N: 2}, nil)
		require.NoError(t, err)
		second <- res
	}()
	waitGrouped(t, c, 2)
	cancel()
	require.ErrorIs(t, <-first, context.Canceled)
	close(d.open)
	inflight.Wait()
	res := <-second
	require.JSONEq(t, `{"n":2}`, string(res.Job.Args))
	jobs, total, err := c.JobList(context.Background(), "default", JobStateAvailable, nil)
	require.NoError(t, err)
	for _, j := range jobs {
		require.NotEqual(t, `{"n":1}`, string(j.Args), "the job of a caller that gave up before its group was sent was inserted")
	}
	require.Equal(t, maxInflight+1, total)
}

// cancellingInserts inserts, then ends the caller's context before it
// answers: the reply of a call that succeeded arrives as the caller's
// deadline passes.
type cancellingInserts struct {
	batondriver.JobDriver
	cancel context.CancelFunc
}

func (d *cancellingInserts) JobInsert(ctx context.Context, p *batondriver.JobInsertParams) (*batondriver.JobInsertResult, error) {
	res, err := d.JobDriver.JobInsert(ctx, p)
	d.cancel()
	return res, err
}

// An insert whose call returned the job inserted returns it, even if the
// caller's context ended meanwhile: an error would say that it may not have
// been, and a caller that retries would insert it twice.
func TestInsertReturnsJobInsertedAsContextEnds(t *testing.T) {
	t.Parallel()
	d := &cancellingInserts{JobDriver: batonmem.New()}
	c, err := NewClient(d, &Config{AllowUnknownKinds: true})
	require.NoError(t, err)
	for i := range 64 {
		ctx, cancel := context.WithCancel(context.Background())
		d.cancel = cancel
		res, err := c.Insert(ctx, groupArgs{N: i}, nil)
		require.NoError(t, err, "insert #%d: the job was inserted", i)
		require.JSONEq(t, fmt.Sprintf(`{"n":%d}`, i), string(res.Job.Args))
	}
}

// panickyInserts panics in its first n inserts.
type panickyInserts struct {
	batondriver.JobDriver
	n atomic.Int32
}

func (d *panickyInserts) JobInsert(ctx context.Context, p *batondriver.JobInsertParams) (*batondriver.JobInsertResult, error) {
	if d.n.Add(-1) >= 0 {
		panic("driver bug")
	}
	return d.JobDriver.JobInsert(ctx, p)
}

// An insert whose driver call panics, the panic recovered by the caller
// (as net/http does a handler's), leaves no call counted in flight: else,
// after maxInflight of them, every insert into the queue would wait for a
// call that never returns.
func TestInsertPanicLeavesNoCallInFlight(t *testing.T) {
	t.Parallel()
	d := &panickyInserts{JobDriver: batonmem.New()}
	d.n.Store(maxInflight)
	c, err := NewClient(d, &Config{AllowUnknownKinds: true})
	require.NoError(t, err)
	for i := range maxInflight {
		func() {
			defer func() { require.Equal(t, "driver bug", recover()) }()
			_, _ = c.Insert(context.Background(), groupArgs{N: i}, nil)
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = c.Insert(ctx, groupArgs{N: maxInflight}, nil)
	require.NoError(t, err)
}

// A group's send leaves out the job of a caller whose context has ended,
// though the caller has not yet marked its job gone (its goroutine has yet
// to run): that caller gets its context's error, which must mean that its
// job was not inserted. Here the first caller's deadline passed before the
// send; the second has none.
func TestInsertGroupLeavesOutJobOfContextEnded(t *testing.T) {
	t.Parallel()
	c, err := NewClient(batonmem.New(), &Config{AllowUnknownKinds: true})
	require.NoError(t, err)
	job := func(n int) *batondriver.JobInsert {
		_, ins, err := c.prepare(&InsertManyParams{Args: groupArgs{N: n}}, time.Now())
		require.NoError(t, err)
		return ins
	}
	qi := c.queueInserter("default")
	turn := make(chan struct{})
	close(turn)
	ended, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
	defer cancel()
	g := &insertGroup{
		members: []groupMember{{job: job(1), ctx: ended}, {job: job(2), ctx: context.Background()}},
		turn:    turn, sending: true, done: make(chan struct{}),
	}
	qi.inflight, qi.next = 1, g // handed on by a call that returned (handOn)
	c.sendGroup(context.Background(), qi, "default", g)
	<-g.done
	require.NoError(t, g.err)
	require.JSONEq(t, `{"n":2}`, string(g.results[1].Job.Args))
	jobs, total, err := c.JobList(context.Background(), "default", JobStateAvailable, nil)
	require.NoError(t, err)
	require.Equal(t, 1, total, "the job of a caller whose deadline had passed was sent: %+v", jobs)
	require.Zero(t, qi.inflight)
}
