package batonredis

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
)

// A fetch whose caller gave up while the server was stalled leases nothing
// when the server runs it after all: the job stays available, its attempt
// not counted, for the next fetch.
func TestJobFetchAfterCallerGaveUp(t *testing.T) {
	t.Parallel()
	srv, client := faultServer(t)
	d := newDriver(t, client)
	q := "q" + randomHex(4)
	rows := insertJobs(t, d, q, newJob("k", 1))
	// An empty fetch gives the driver a sample of the server's clock.
	res, err := d.JobFetch(jobCtx(t), &batondriver.JobFetchParams{Queue: q, LeaseTTL: time.Minute})
	require.NoError(t, err)
	require.Empty(t, res.Jobs)

	require.NoError(t, srv.Pause())
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err = d.JobFetch(ctx, &batondriver.JobFetchParams{Queue: q, Max: 1, LeaseTTL: time.Minute})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	time.Sleep(100 * time.Millisecond) // the stalled call's deadline is well past
	require.NoError(t, srv.Resume())

	j, err := d.JobGet(jobCtx(t), &batondriver.JobGetParams{Queue: q, ID: rows[0].ID})
	require.NoError(t, err)
	require.Equal(t, batondriver.JobStateAvailable, j.State, "leased by a call nobody waited for")
	require.Zero(t, j.Attempt)
	got := fetchJobs(t, d, q, 1, time.Minute)
	require.Equal(t, []string{rows[0].ID}, ids(got.Jobs))
	require.Equal(t, 1, got.Jobs[0].Attempt)
}

// The same for a finish that fetches: its outcome is recorded when the
// server runs it, but the job it would have leased stays available.
func TestJobFinishFetchAfterCallerGaveUp(t *testing.T) {
	t.Parallel()
	srv, client := faultServer(t)
	d := newDriver(t, client)
	q := "q" + randomHex(4)
	rows := insertJobs(t, d, q, newJob("k", 1), newJob("k", 1))
	first := fetchJobs(t, d, q, 1, time.Minute).Jobs[0]

	require.NoError(t, srv.Pause())
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err := d.JobFinish(ctx, &batondriver.JobFinishParams{Queue: q, Retention: time.Hour,
		Fetch:    &batondriver.JobFinishFetch{Max: 1, LeaseTTL: time.Minute},
		Finished: []*batondriver.JobFinish{{JobLease: batondriver.JobLease{ID: first.ID, Lease: first.Lease}, Outcome: batondriver.JobOutcomeCompleted}}})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, srv.Resume())

	j, err := d.JobGet(jobCtx(t), &batondriver.JobGetParams{Queue: q, ID: first.ID})
	require.NoError(t, err)
	require.Equal(t, batondriver.JobStateCompleted, j.State, "the outcome is recorded all the same")
	j, err = d.JobGet(jobCtx(t), &batondriver.JobGetParams{Queue: q, ID: rows[1].ID})
	require.NoError(t, err)
	require.Equal(t, batondriver.JobStateAvailable, j.State, "leased by a call nobody waited for")
	require.Zero(t, j.Attempt)
}

func TestServerClocksDeadline(t *testing.T) {
	t.Parallel()
	var c serverClocks
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.Zero(t, c.deadline(ctx, "q"), "no sample yet")
	require.Zero(t, c.deadline(context.Background(), "q"), "no deadline")

	sent := time.Now().Add(-5 * time.Millisecond)
	c.observe("q", sent, 1_000_000, false)
	dl, _ := ctx.Deadline()
	ahead := dl.Sub(sent)
	got := c.deadline(ctx, "q")
	require.GreaterOrEqual(t, got, 1_000_000+ahead.Milliseconds()+1, "never early: the server's clock read is taken at the send")
	require.LessOrEqual(t, got, 1_000_000+ahead.Milliseconds()+1+ahead.Milliseconds()/maxDrift+1, "slack only for drift")
	require.Zero(t, c.deadline(ctx, "other"), "samples are per queue")

	// A slower round trip does not replace a recent faster one, unless forced.
	c.observe("q", time.Now().Add(-time.Second), 5_000_000, false)
	require.Equal(t, got, c.deadline(ctx, "q"))
	c.observe("q", time.Now().Add(-time.Second), 5_000_000, true)
	require.Greater(t, c.deadline(ctx, "q"), int64(5_000_000))
	// A faster one replaces it.
	c.observe("q", time.Now(), 2_000_000, false)
	require.Less(t, c.deadline(ctx, "q"), int64(2_100_000))
}
