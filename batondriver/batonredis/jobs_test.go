package batonredis

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batondrivertest"
	"github.com/batonhq/baton/internal/redistest"
)

func TestJobConformanceStandalone(t *testing.T) {
	t.Parallel()
	client := newClient(t, redistest.SharedServer(t).Addr())
	batondrivertest.ExerciseJobs(t, func(t *testing.T) batondriver.JobDriver { return newDriver(t, client) })
}

func TestJobConformanceCluster(t *testing.T) {
	t.Parallel()
	client := newClient(t, redistest.SharedCluster(t).Addrs()...)
	batondrivertest.ExerciseJobs(t, func(t *testing.T) batondriver.JobDriver { return newDriver(t, client) })
}

// jobSetup returns a client on the shared server, a driver with a prefix of
// its own and a queue name.
func jobSetup(t *testing.T) (rueidis.Client, *Driver, string) {
	t.Helper()
	client := newClient(t, redistest.SharedServer(t).Addr())
	return client, newDriver(t, client), "q" + randomHex(4)
}

// jobCtx returns a context that ends with the test or after 10s.
func jobCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func insertJobs(t *testing.T, d *Driver, queue string, jobs ...*batondriver.JobInsert) []*batondriver.JobRow {
	t.Helper()
	res, err := d.JobInsert(jobCtx(t), &batondriver.JobInsertParams{Queue: queue, Jobs: jobs})
	require.NoError(t, err)
	require.Len(t, res.Jobs, len(jobs))
	return res.Jobs
}

func newJob(kind string, prio int) *batondriver.JobInsert {
	return &batondriver.JobInsert{Kind: kind, Args: []byte(`{"n":1}`), Priority: prio, MaxAttempts: 3}
}

func fetchJobs(t *testing.T, d *Driver, queue string, n int, ttl time.Duration) *batondriver.JobFetchResult {
	t.Helper()
	res, err := d.JobFetch(jobCtx(t), &batondriver.JobFetchParams{Queue: queue, Max: n, LeaseTTL: ttl})
	require.NoError(t, err)
	return res
}

func ids(rows []*batondriver.JobRow) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

func TestJobInsertFetchFinish(t *testing.T) {
	t.Parallel()
	_, d, q := jobSetup(t)
	ctx := jobCtx(t)
	in := newJob("email", 2)
	in.Tags = []string{"a", "b"}
	in.Metadata = []byte(`{"m":true}`)
	rows := insertJobs(t, d, q, in, newJob("email", 1), newJob("email", 2), newJob("sms", 0))
	for _, r := range rows {
		require.Equal(t, batondriver.JobStateAvailable, r.State)
		require.Len(t, r.ID, 26)
		require.Equal(t, q, r.Queue)
	}
	got, err := d.JobGet(ctx, &batondriver.JobGetParams{Queue: q, ID: rows[0].ID})
	require.NoError(t, err)
	require.Equal(t, rows[0], got)

	// Priority first, then arrival.
	res := fetchJobs(t, d, q, 3, time.Minute)
	require.Equal(t, []string{rows[3].ID, rows[1].ID, rows[0].ID}, ids(res.Jobs))
	require.False(t, res.Paused)
	require.True(t, res.NextRunAt.IsZero())
	j := res.Jobs[2]
	require.Equal(t, batondriver.JobStateRunning, j.State)
	require.Equal(t, 1, j.Attempt)
	require.Equal(t, []string{"a", "b"}, j.Tags)
	require.JSONEq(t, `{"m":true}`, string(j.Metadata))
	require.Len(t, j.Lease, 22)
	require.WithinDuration(t, j.AttemptedAt.Add(time.Minute), j.LeaseUntil, time.Millisecond)
	require.NotEqual(t, res.Jobs[0].Lease, res.Jobs[1].Lease)

	fin, err := d.JobFinish(ctx, &batondriver.JobFinishParams{Queue: q, Retention: time.Hour, Finished: []*batondriver.JobFinish{
		{JobLease: batondriver.JobLease{ID: res.Jobs[0].ID, Lease: res.Jobs[0].Lease}, Outcome: batondriver.JobOutcomeCompleted},
		{JobLease: batondriver.JobLease{ID: res.Jobs[1].ID, Lease: "wrong"}, Outcome: batondriver.JobOutcomeCompleted},
		{JobLease: batondriver.JobLease{ID: res.Jobs[2].ID, Lease: res.Jobs[2].Lease}, Outcome: batondriver.JobOutcomeCompleted},
	}})
	require.NoError(t, err)
	require.Equal(t, []string{res.Jobs[1].ID}, fin.Stale)
	done, err := d.JobGet(ctx, &batondriver.JobGetParams{Queue: q, ID: res.Jobs[0].ID})
	require.NoError(t, err)
	require.Equal(t, batondriver.JobStateCompleted, done.State)
	require.False(t, done.FinishedAt.IsZero())
	require.Empty(t, done.Lease)
	require.True(t, done.LeaseUntil.IsZero())

	stats, err := d.QueueStats(ctx, &batondriver.QueueParams{Queue: q})
	require.NoError(t, err)
	require.Equal(t, map[batondriver.JobState]int{
		batondriver.JobStateAvailable: 1, batondriver.JobStateRunning: 1, batondriver.JobStateCompleted: 2,
		batondriver.JobStateScheduled: 0, batondriver.JobStateDead: 0, batondriver.JobStateCancelled: 0,
		batondriver.JobStateParked: 0, batondriver.JobStateDropped: 0,
	}, stats.Counts)
	require.Equal(t, rows[2].RunAt, stats.OldestAvailable)

	queues, err := d.QueueList(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{q}, queues)
}

func TestJobScheduled(t *testing.T) {
	t.Parallel()
	_, d, q := jobSetup(t)
	runAt := time.Now().Add(150 * time.Millisecond)
	in := newJob("later", 1)
	in.RunAt = runAt
	rows := insertJobs(t, d, q, in)
	require.Equal(t, batondriver.JobStateScheduled, rows[0].State)
	// Stored to the millisecond, rounded up: never due early.
	require.False(t, rows[0].RunAt.Before(runAt))
	require.Less(t, rows[0].RunAt.Sub(runAt), time.Millisecond)

	res := fetchJobs(t, d, q, 1, time.Minute)
	require.Empty(t, res.Jobs)
	require.Equal(t, rows[0].RunAt, res.NextRunAt)
	deadline := time.Now().Add(5 * time.Second)
	for len(res.Jobs) == 0 {
		require.False(t, time.Now().After(deadline), "scheduled job never fetched")
		time.Sleep(5 * time.Millisecond)
		res = fetchJobs(t, d, q, 1, time.Minute)
	}
	require.False(t, time.Now().Before(runAt), "fetched %v before its RunAt", time.Until(runAt))
	require.Equal(t, []string{rows[0].ID}, ids(res.Jobs))
	require.Equal(t, rows[0].RunAt, res.Jobs[0].RunAt, "a due job keeps its RunAt")
}

// fetchUntilRecovered fetches until a fetch takes back an expired lease.
func fetchUntilRecovered(t *testing.T, d *Driver, p *batondriver.JobFetchParams) *batondriver.JobFetchResult {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err := d.JobFetch(jobCtx(t), p)
		require.NoError(t, err)
		if res.Recovered > 0 {
			return res
		}
		require.False(t, time.Now().After(deadline), "no lease recovered")
		time.Sleep(5 * time.Millisecond)
	}
}

func TestJobRecover(t *testing.T) {
	t.Parallel()
	_, d, q := jobSetup(t)
	ctx := jobCtx(t)
	once := newJob("once", 1)
	once.MaxAttempts = 1
	rows := insertJobs(t, d, q, newJob("twice", 1), once)
	first := fetchJobs(t, d, q, 2, 30*time.Millisecond)
	require.Len(t, first.Jobs, 2)

	ext, err := d.JobExtend(ctx, &batondriver.JobExtendParams{Queue: q, TTL: 20 * time.Millisecond, Leases: []batondriver.JobLease{
		{ID: first.Jobs[0].ID, Lease: first.Jobs[0].Lease}, {ID: first.Jobs[1].ID, Lease: "nope"},
	}})
	require.NoError(t, err)
	require.Equal(t, []string{first.Jobs[1].ID}, ext.Lost)

	res := fetchUntilRecovered(t, d, &batondriver.JobFetchParams{Queue: q, Max: 5, LeaseTTL: time.Minute})
	// Both leases expired by the same fetch or by two in a row.
	recovered := res.Recovered
	got := res.Jobs
	if recovered < 2 {
		res = fetchUntilRecovered(t, d, &batondriver.JobFetchParams{Queue: q, Max: 5, LeaseTTL: time.Minute})
		recovered += res.Recovered
		got = append(got, res.Jobs...)
	}
	require.Equal(t, 2, recovered)
	require.Equal(t, []string{rows[0].ID}, ids(got), "retried at once with RecoverDelay 0")
	require.Equal(t, 2, got[0].Attempt, "the expired attempt stays counted")
	require.Len(t, got[0].Errors, 1)
	require.Equal(t, "lease expired", got[0].Errors[0].Error)
	require.Equal(t, 1, got[0].Errors[0].Attempt)

	dead, err := d.JobGet(ctx, &batondriver.JobGetParams{Queue: q, ID: rows[1].ID})
	require.NoError(t, err)
	require.Equal(t, batondriver.JobStateDead, dead.State)
	require.Equal(t, "lease expired", dead.Errors[0].Error)
	require.False(t, dead.FinishedAt.IsZero())

	// The first owner's outcome is stale.
	fin, err := d.JobFinish(ctx, &batondriver.JobFinishParams{Queue: q, Finished: []*batondriver.JobFinish{
		{JobLease: batondriver.JobLease{ID: first.Jobs[0].ID, Lease: first.Jobs[0].Lease}, Outcome: batondriver.JobOutcomeCompleted},
	}})
	require.NoError(t, err)
	require.Equal(t, []string{rows[0].ID}, fin.Stale)
}

// A reply of job_extend naming a lease it was not given (0, or past the
// last), as lost or as asked to cancel, is an error that says so, not a
// panic or another job's ID. The script is swapped for one that answers
// with such a number.
func TestJobExtendRejectsLeaseNumbersOutOfRange(t *testing.T) {
	t.Parallel()
	for bad, want := range map[string]string{
		"{0}, {}": "#0", "{-1}, {}": "#-1", "{n + 1}, {}": "#3",
		"{}, {0}": "#0", "{}, {n + 1}": "#3",
	} {
		t.Run(bad, func(t *testing.T) {
			t.Parallel()
			_, d, q := jobSetup(t)
			broken := *d.scripts
			_, f := newJobLibrary(luaJobLib, map[string]string{
				"job_extend": "local n = #KEYS - FIRST_JOB_KEY + 1\nreturn {now_ms(), " + bad + "}",
			})
			broken.jobExtend = f["job_extend"]
			d.scripts = &broken

			var res *batondriver.JobExtendResult
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("JobExtend panicked on lease #%s of 2: %v", bad, p)
					}
				}()
				res, err = d.JobExtend(jobCtx(t), &batondriver.JobExtendParams{Queue: q, TTL: time.Minute, Leases: []batondriver.JobLease{
					{ID: "a", Lease: "la"}, {ID: "b", Lease: "lb"},
				}})
			}()
			require.Error(t, err, "lost: %v", res)
			require.Nil(t, res)
			require.ErrorContains(t, err, "unexpected reply: lease "+want+" of 2")
		})
	}
}

func TestJobRecoverDelay(t *testing.T) {
	t.Parallel()
	_, d, q := jobSetup(t)
	rows := insertJobs(t, d, q, newJob("k", 1))
	fetchJobs(t, d, q, 1, 10*time.Millisecond)
	res := fetchUntilRecovered(t, d, &batondriver.JobFetchParams{Queue: q, Max: 1, LeaseTTL: time.Minute, RecoverDelay: time.Hour})
	require.Empty(t, res.Jobs)
	require.WithinDuration(t, time.Now().Add(time.Hour), res.NextRunAt, 5*time.Second)
	j, err := d.JobGet(jobCtx(t), &batondriver.JobGetParams{Queue: q, ID: rows[0].ID})
	require.NoError(t, err)
	require.Equal(t, batondriver.JobStateScheduled, j.State)
	require.Equal(t, res.NextRunAt, j.RunAt)
}

func TestJobOutcomes(t *testing.T) {
	t.Parallel()
	_, d, q := jobSetup(t)
	ctx := jobCtx(t)
	last := newJob("k", 1)
	last.MaxAttempts = 1
	rows := insertJobs(t, d, q, newJob("k", 1), newJob("k", 1), newJob("k", 1), newJob("k", 1), last, newJob("k", 1))
	res := fetchJobs(t, d, q, 6, time.Minute)
	require.Equal(t, ids(rows), ids(res.Jobs))
	later := time.Now().Add(time.Hour)
	outcome := func(i int, o batondriver.JobOutcome, msg string, at time.Time) *batondriver.JobFinish {
		return &batondriver.JobFinish{JobLease: batondriver.JobLease{ID: res.Jobs[i].ID, Lease: res.Jobs[i].Lease},
			Outcome: o, Error: msg, RunAt: at}
	}
	fin, err := d.JobFinish(ctx, &batondriver.JobFinishParams{Queue: q, Finished: []*batondriver.JobFinish{
		outcome(0, batondriver.JobOutcomeRetry, "boom", later),
		outcome(1, batondriver.JobOutcomeSnooze, "", later),
		outcome(2, batondriver.JobOutcomeCancel, "stop", time.Time{}),
		outcome(3, batondriver.JobOutcomeDead, "bad", time.Time{}),
		outcome(4, batondriver.JobOutcomeRetry, "last", later),
		outcome(5, batondriver.JobOutcomeRetry, "", time.Time{}),
	}})
	require.NoError(t, err)
	require.Empty(t, fin.Stale)

	get := func(i int) *batondriver.JobRow {
		j, err := d.JobGet(ctx, &batondriver.JobGetParams{Queue: q, ID: rows[i].ID})
		require.NoError(t, err)
		require.Empty(t, j.Lease)
		return j
	}
	j := get(0)
	require.Equal(t, batondriver.JobStateScheduled, j.State)
	require.WithinDuration(t, later, j.RunAt, time.Millisecond)
	require.False(t, j.RunAt.Before(later))
	require.Equal(t, 1, j.Attempt)
	require.Equal(t, []batondriver.AttemptError{{Attempt: 1, At: j.Errors[0].At, Error: "boom"}}, j.Errors)
	j = get(1)
	require.Equal(t, batondriver.JobStateScheduled, j.State)
	require.Equal(t, 0, j.Attempt, "a snooze gives the attempt back")
	require.Empty(t, j.Errors)
	j = get(2)
	require.Equal(t, batondriver.JobStateCancelled, j.State)
	require.Equal(t, "stop", j.Errors[0].Error)
	j = get(3)
	require.Equal(t, batondriver.JobStateDead, j.State)
	require.Equal(t, "bad", j.Errors[0].Error)
	j = get(4)
	require.Equal(t, batondriver.JobStateDead, j.State, "a retry with no attempts left is dead")
	require.Equal(t, "last", j.Errors[0].Error)
	j = get(5)
	require.Equal(t, batondriver.JobStateAvailable, j.State, "a retry due now is available at once")
	require.Equal(t, []string{""}, []string{j.Errors[0].Error})

	list, err := d.JobList(ctx, &batondriver.JobListParams{Queue: q, State: batondriver.JobStateScheduled, Limit: 10})
	require.NoError(t, err)
	require.Equal(t, 2, list.Total)
	require.ElementsMatch(t, []string{rows[0].ID, rows[1].ID}, ids(list.Jobs))

	// Admin retry: dead, cancelled and scheduled jobs run again now.
	for _, i := range []int{2, 3, 1} {
		r, err := d.JobRetry(ctx, &batondriver.JobGetParams{Queue: q, ID: rows[i].ID})
		require.NoError(t, err)
		require.Equal(t, batondriver.JobStateAvailable, r.State)
		require.Equal(t, 0, r.Attempt)
		require.True(t, r.FinishedAt.IsZero())
	}
	list, err = d.JobList(ctx, &batondriver.JobListParams{Queue: q, State: batondriver.JobStateAvailable, Limit: 2, Offset: 1})
	require.NoError(t, err)
	require.Equal(t, 4, list.Total)
	require.Equal(t, []string{rows[2].ID, rows[3].ID}, ids(list.Jobs), "oldest RunAt first")
	err = d.JobDelete(ctx, &batondriver.JobGetParams{Queue: q, ID: rows[2].ID})
	require.NoError(t, err)
	err = d.JobDelete(ctx, &batondriver.JobGetParams{Queue: q, ID: rows[2].ID})
	require.ErrorIs(t, err, batondriver.ErrJobNotFound)
	_, err = d.JobRetry(ctx, &batondriver.JobGetParams{Queue: q, ID: rows[2].ID})
	require.ErrorIs(t, err, batondriver.ErrJobNotFound)
	_, err = d.JobGet(ctx, &batondriver.JobGetParams{Queue: q, ID: rows[2].ID})
	require.ErrorIs(t, err, batondriver.ErrJobNotFound)

	// Running jobs can be neither retried nor deleted.
	res = fetchJobs(t, d, q, 1, time.Minute)
	require.Len(t, res.Jobs, 1)
	_, err = d.JobRetry(ctx, &batondriver.JobGetParams{Queue: q, ID: res.Jobs[0].ID})
	require.ErrorIs(t, err, batondriver.ErrBadParams)
	err = d.JobDelete(ctx, &batondriver.JobGetParams{Queue: q, ID: res.Jobs[0].ID})
	require.ErrorIs(t, err, batondriver.ErrBadParams)
}

func TestJobMaxErrors(t *testing.T) {
	t.Parallel()
	_, d, q := jobSetup(t)
	in := newJob("k", 1)
	in.MaxAttempts = 100
	rows := insertJobs(t, d, q, in)
	for i := range batondriver.MaxErrors + 3 {
		res := fetchJobs(t, d, q, 1, time.Minute)
		require.Len(t, res.Jobs, 1)
		_, err := d.JobFinish(jobCtx(t), &batondriver.JobFinishParams{Queue: q, Finished: []*batondriver.JobFinish{{
			JobLease: batondriver.JobLease{ID: res.Jobs[0].ID, Lease: res.Jobs[0].Lease},
			Outcome:  batondriver.JobOutcomeRetry, Error: fmt.Sprintf("err %d \"quoted\" \u00e9/\n", i+1),
		}}})
		require.NoError(t, err)
	}
	j, err := d.JobGet(jobCtx(t), &batondriver.JobGetParams{Queue: q, ID: rows[0].ID})
	require.NoError(t, err)
	require.Len(t, j.Errors, batondriver.MaxErrors)
	require.Equal(t, 4, j.Errors[0].Attempt)
	require.Equal(t, "err 13 \"quoted\" \u00e9/\n", j.Errors[batondriver.MaxErrors-1].Error)
}

func TestJobPause(t *testing.T) {
	t.Parallel()
	_, d, q := jobSetup(t)
	ctx := jobCtx(t)
	insertJobs(t, d, q, newJob("k", 1))
	require.NoError(t, d.QueuePause(ctx, &batondriver.QueuePauseParams{Queue: q}))
	res := fetchJobs(t, d, q, 1, time.Minute)
	require.True(t, res.Paused)
	require.Empty(t, res.Jobs)
	stats, err := d.QueueStats(ctx, &batondriver.QueueParams{Queue: q})
	require.NoError(t, err)
	require.True(t, stats.Paused)
	require.NoError(t, d.QueuePause(ctx, &batondriver.QueuePauseParams{Queue: q, Resume: true}))
	res = fetchJobs(t, d, q, 1, time.Minute)
	require.False(t, res.Paused)
	require.Len(t, res.Jobs, 1)
}

// A list's flag in meta (docs/redis-keys.md) is set by the push that starts
// the list and cleared by the fetch that drains it, not by one that leaves
// jobs in it: no later fetch pops an empty list.
func TestJobDrainedListUnflagged(t *testing.T) {
	t.Parallel()
	client, d, q := jobSetup(t)
	meta := d.queueKeys(q).keys[keyMeta]
	flagged := func() bool {
		ok, err := client.Do(t.Context(), client.B().Hexists().Key(meta).Field("a3").Build()).AsBool()
		require.NoError(t, err)
		return ok
	}
	insertJobs(t, d, q, newJob("k", 3), newJob("k", 3))
	require.True(t, flagged(), "the push that started the list")
	require.Len(t, fetchJobs(t, d, q, 1, time.Minute).Jobs, 1)
	require.True(t, flagged(), "a job is left")
	require.Len(t, fetchJobs(t, d, q, 10, time.Minute).Jobs, 1)
	require.False(t, flagged(), "the fetch drained the list")
}

func TestJobBadParams(t *testing.T) {
	t.Parallel()
	_, d, q := jobSetup(t)
	ctx := jobCtx(t)
	for _, bad := range []string{"", "a b", "{x}", "é", strings.Repeat("x", 129)} {
		_, err := d.JobInsert(ctx, &batondriver.JobInsertParams{Queue: bad, Jobs: []*batondriver.JobInsert{newJob("k", 1)}})
		require.ErrorIs(t, err, batondriver.ErrBadParams, "queue %q", bad)
	}
	insertJobs(t, d, strings.Repeat("x", 122)+"-_.:A9")
	for _, j := range []*batondriver.JobInsert{
		nil, {Kind: "", MaxAttempts: 1}, {Kind: "k", Priority: -1, MaxAttempts: 1},
		{Kind: "k", Priority: batondriver.MaxPriority + 1, MaxAttempts: 1}, {Kind: "k"},
	} {
		_, err := d.JobInsert(ctx, &batondriver.JobInsertParams{Queue: q, Jobs: []*batondriver.JobInsert{j}})
		require.ErrorIs(t, err, batondriver.ErrBadParams)
	}
	for _, p := range []*batondriver.JobFetchParams{
		{Queue: q, Max: -1, LeaseTTL: time.Second}, {Queue: q, Max: 1}, {Queue: q, Max: 1, LeaseTTL: time.Second, RecoverDelay: -1},
	} {
		_, err := d.JobFetch(ctx, p)
		require.ErrorIs(t, err, batondriver.ErrBadParams)
	}
	_, err := d.JobFinish(ctx, &batondriver.JobFinishParams{Queue: q, Finished: []*batondriver.JobFinish{
		{JobLease: batondriver.JobLease{ID: "x", Lease: "y"}, Outcome: "done"},
	}})
	require.ErrorIs(t, err, batondriver.ErrBadParams)
	_, err = d.JobExtend(ctx, &batondriver.JobExtendParams{Queue: q, TTL: 0})
	require.ErrorIs(t, err, batondriver.ErrBadParams)
	err = d.JobWait(ctx, &batondriver.JobWaitParams{Queue: q})
	require.ErrorIs(t, err, batondriver.ErrBadParams)
	_, err = d.JobList(ctx, &batondriver.JobListParams{Queue: q, State: "lost"})
	require.ErrorIs(t, err, batondriver.ErrBadParams)
	_, err = d.JobList(ctx, &batondriver.JobListParams{Queue: q, State: batondriver.JobStateDead, Limit: 1001})
	require.ErrorIs(t, err, batondriver.ErrBadParams)
	_, err = d.JobGet(ctx, &batondriver.JobGetParams{Queue: q, ID: "nope"})
	require.ErrorIs(t, err, batondriver.ErrJobNotFound)
	require.Contains(t, err.Error(), `batonredis: get from "`+q+`"`)
}

// waitResult is what one JobWait call returned and when.
type waitResult struct {
	err error
	at  time.Time
}

func TestJobWaitWakesOne(t *testing.T) {
	t.Parallel()
	_, d, q := jobSetup(t)
	ctx := jobCtx(t)
	// A token pushed while nobody waits is taken by the next wait; a fetch
	// that empties the queue drops tokens no job backs any more.
	insertJobs(t, d, q, newJob("k", 1))
	require.NoError(t, d.JobWait(ctx, &batondriver.JobWaitParams{Queue: q, Timeout: time.Second}))
	fetchJobs(t, d, q, 2, time.Minute)

	const timeout = 3 * time.Second
	results := make(chan waitResult, 2)
	var started sync.WaitGroup
	for range 2 {
		started.Add(1)
		go func() {
			started.Done()
			err := d.JobWait(ctx, &batondriver.JobWaitParams{Queue: q, Timeout: timeout})
			results <- waitResult{err, time.Now()}
		}()
	}
	started.Wait()
	waitBlocked(t, d, 2)
	start := time.Now()
	insertJobs(t, d, q, newJob("k", 1))
	first := <-results
	require.NoError(t, first.err)
	require.Less(t, first.at.Sub(start), timeout/2, "one waiter woke at once")
	second := <-results
	require.NoError(t, second.err)
	require.GreaterOrEqual(t, second.at.Sub(start), timeout-100*time.Millisecond, "the other waited out its timeout")
}

// waitBlocked waits until n clients are blocked (on any key of the shared
// server; tests running alongside may add more).
func waitBlocked(t *testing.T, d *Driver, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		info, err := d.client.Do(t.Context(), d.client.B().Info().Section("clients").Build()).ToString()
		require.NoError(t, err)
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "blocked_clients:"); ok {
				var got int64
				_, _ = fmt.Sscan(v, &got)
				if got >= n {
					return
				}
			}
		}
		require.False(t, time.Now().After(deadline), "waiters not blocked")
		time.Sleep(2 * time.Millisecond)
	}
}

func TestJobWaitContext(t *testing.T) {
	t.Parallel()
	_, d, q := jobSetup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := d.JobWait(ctx, &batondriver.JobWaitParams{Queue: q, Timeout: time.Minute})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 5*time.Second)
	// The timeout alone ends a wait with nil.
	require.NoError(t, d.JobWait(jobCtx(t), &batondriver.JobWaitParams{Queue: q, Timeout: 20 * time.Millisecond}))
}

// scanAll lists every key under the driver's prefix on every node.
func scanAll(t *testing.T, client rueidis.Client, d *Driver) []string {
	t.Helper()
	var keys []string
	for _, node := range client.Nodes() {
		var cursor uint64
		for {
			e, err := node.Do(t.Context(), node.B().Scan().Cursor(cursor).Match(d.prefix+":*").Count(1000).Build()).AsScanEntry()
			require.NoError(t, err)
			keys = append(keys, e.Elements...)
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// scanKept is scanAll but the records of leasing calls (leaserecords.go),
// each of which must expire within ttl and the records' grace beyond it.
func scanKept(t *testing.T, client rueidis.Client, d *Driver, ttl time.Duration) []string {
	t.Helper()
	return slices.DeleteFunc(scanAll(t, client, d), func(key string) bool {
		if !strings.Contains(key, "}:lease:") {
			return false
		}
		left, err := client.Do(t.Context(), client.B().Pttl().Key(key).Build()).AsInt64()
		require.NoError(t, err)
		require.Truef(t, left > 0 && left <= (ttl+recordGrace).Milliseconds(), "record %s expires in %d ms", key, left)
		return true
	})
}

// jobsInEveryState leaves jobs of queue q in every state.
func jobsInEveryState(t *testing.T, d *Driver, q string) {
	t.Helper()
	later := newJob("k", 1)
	later.RunAt = time.Now().Add(time.Hour)
	insertJobs(t, d, q, newJob("k", 1), newJob("k", 1), newJob("k", 1), newJob("k", 1), newJob("k", 1), later)
	res := fetchJobs(t, d, q, 4, time.Minute)
	require.Len(t, res.Jobs, 4)
	_, err := d.JobFinish(jobCtx(t), &batondriver.JobFinishParams{Queue: q, Retention: time.Hour, Finished: []*batondriver.JobFinish{
		{JobLease: batondriver.JobLease{ID: res.Jobs[0].ID, Lease: res.Jobs[0].Lease}, Outcome: batondriver.JobOutcomeCompleted},
		{JobLease: batondriver.JobLease{ID: res.Jobs[1].ID, Lease: res.Jobs[1].Lease}, Outcome: batondriver.JobOutcomeCancel},
		{JobLease: batondriver.JobLease{ID: res.Jobs[2].ID, Lease: res.Jobs[2].Lease}, Outcome: batondriver.JobOutcomeDead},
	}})
	require.NoError(t, err)
	require.NoError(t, d.QueuePause(jobCtx(t), &batondriver.QueuePauseParams{Queue: q}))
}

// Every key of a queue lands in one Cluster slot, so each transition is one
// script on one node.
func TestJobKeysOneSlot(t *testing.T) {
	t.Parallel()
	client := newClient(t, redistest.SharedCluster(t).Addrs()...)
	d := newDriver(t, client)
	for _, q := range []string{"a", "orders:eu-1", "x.y_z"} {
		jobsInEveryState(t, d, q)
	}
	keys := scanAll(t, client, d)
	bySlot := map[string]map[int64]bool{}
	for _, k := range keys {
		if k == d.queuesKey() {
			continue
		}
		slot, err := client.Do(t.Context(), client.B().ClusterKeyslot().Key(k).Build()).AsInt64()
		require.NoError(t, err)
		q := strings.TrimPrefix(k, d.prefix+":queue:{")
		q = q[:strings.Index(q, "}")]
		if bySlot[q] == nil {
			bySlot[q] = map[int64]bool{}
		}
		bySlot[q][slot] = true
	}
	require.Len(t, bySlot, 3)
	for q, slots := range bySlot {
		require.Len(t, slots, 1, "queue %q spans slots %v", q, slots)
	}
	// available, scheduled, running, completed, dead, cancelled, meta, wake,
	// the record of the fetch (leaserecords.go) and six jobs per queue; and
	// the queue set.
	require.Len(t, keys, 3*(9+6)+1, "%v", keys)
}

// Nothing grows without bound: once every job of a queue is done, only its
// meta hash and its entry in the queue set remain — nothing of the
// concurrency keys its jobs had, nor of a limit override once reset, nor
// of their unique keys' claims.
func TestJobCleanup(t *testing.T) {
	t.Parallel()
	for _, retention := range []time.Duration{0, time.Millisecond} {
		t.Run(fmt.Sprint(retention), func(t *testing.T) {
			t.Parallel()
			client, d, q := jobSetup(t)
			ctx := jobCtx(t)
			const n = 250
			jobs := make([]*batondriver.JobInsert, n)
			for i := range jobs {
				jobs[i] = newJob("k", i%10)
				if i%2 == 0 { // 7 keys of limit 2: most of their jobs park
					jobs[i].Key, jobs[i].Limit = fmt.Sprintf("c%d", i%7), 2
				}
				if i%3 == 0 { // claims of every scope, released or lapsed
					scopes := []batondriver.UniqueScope{batondriver.UniqueQueued, batondriver.UniqueRunning,
						batondriver.UniqueUntilDone, batondriver.UniquePeriod}
					jobs[i].Unique = &batondriver.JobUnique{Key: fmt.Sprintf("u%d", i), Scope: scopes[i/3%4], Period: time.Millisecond}
				}
			}
			// The meta hash an older version kept for good, with its fence.
			legacy := d.prefix + ":queue:{" + q + "}:key:c0:m"
			require.NoError(t, client.Do(ctx, client.B().Hset().Key(legacy).FieldValue().FieldValue("fence", "1").Build()).Error())
			_, err := d.KeySetLimit(ctx, &batondriver.KeySetLimitParams{Queue: q, Key: "c0", Limit: 3})
			require.NoError(t, err)
			insertJobs(t, d, q, jobs...)
			_, err = d.KeySetLimit(ctx, &batondriver.KeySetLimitParams{Queue: q, Key: "c0", Reset: true})
			require.NoError(t, err)
			for done := 0; done < n; {
				res := fetchJobs(t, d, q, 64, time.Minute)
				fin := make([]*batondriver.JobFinish, len(res.Jobs))
				for i, j := range res.Jobs {
					fin[i] = &batondriver.JobFinish{JobLease: batondriver.JobLease{ID: j.ID, Lease: j.Lease}, Outcome: batondriver.JobOutcomeCompleted}
					if j.Attempt == 1 { // a first attempt fails: retried at once
						fin[i].Outcome, fin[i].Error = batondriver.JobOutcomeRetry, "x"
						continue
					}
					done++
				}
				out, err := d.JobFinish(ctx, &batondriver.JobFinishParams{Queue: q, Retention: retention, Finished: fin})
				require.NoError(t, err)
				require.Empty(t, out.Stale)
			}
			// Sweep: each fetch deletes at most 100 completed jobs past their
			// retention.
			deadline := time.Now().Add(5 * time.Second)
			for {
				require.Empty(t, fetchJobs(t, d, q, 1, time.Minute).Jobs)
				stats, err := d.QueueStats(ctx, &batondriver.QueueParams{Queue: q})
				require.NoError(t, err)
				if stats.Counts[batondriver.JobStateCompleted] == 0 {
					for s, c := range stats.Counts {
						require.Zero(t, c, "%s", s)
					}
					break
				}
				require.False(t, time.Now().After(deadline), "completed jobs not swept")
			}
			base := d.prefix + ":queue:{" + q + "}:"
			require.Equal(t, []string{base + "meta", d.queuesKey()}, scanKept(t, client, d, time.Minute))
		})
	}
}

// On a server that has not loaded the job functions, the pipelined FCALL
// finds its function missing and the insert loads the library once.
func TestJobInsertNoScript(t *testing.T) {
	t.Parallel()
	client := newClient(t, redistest.StartT(t, nil).Addr())
	d := newDriver(t, client)
	for range 2 {
		insertJobs(t, d, "q", newJob("k", 1))
	}
	n, err := client.Do(t.Context(), client.B().Llen().Key(d.queueKeys("q").keys[keyAvailable]+"1").Build()).AsInt64()
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
}

// BenchmarkJobServerTime measures the Redis server time one job costs in
// each transition, by batch size: the script's microseconds from INFO
// commandstats (FCALL's usec, and EVALSHA's where a server runs scripts,
// includes the commands it calls), divided by the jobs. It uses a private
// server, so nothing else is counted.
//
//	go test -run '^$' -bench JobServerTime -benchtime 20000x ./batondriver/batonredis/
func BenchmarkJobServerTime(b *testing.B) {
	client := newClient(b, redistest.StartT(b, nil).Addr())
	d := newDriver(b, client)
	ctx := b.Context()
	usec := func() float64 {
		info, err := client.Do(ctx, client.B().Info().Section("commandstats").Build()).ToString()
		require.NoError(b, err)
		var sum float64
		for _, line := range strings.Split(info, "\r\n") {
			rest, ok := strings.CutPrefix(line, "cmdstat_fcall:")
			if !ok {
				rest, ok = strings.CutPrefix(line, "cmdstat_evalsha:")
			}
			if !ok {
				continue
			}
			for _, kv := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(kv, "usec="); ok {
					var u float64
					_, _ = fmt.Sscan(v, &u)
					sum += u
				}
			}
		}
		return sum
	}
	for _, batch := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			q := "bench" + randomHex(4)
			n := b.N
			var rows []*batondriver.JobRow
			phase := func(name string, run func()) {
				require.NoError(b, client.Do(ctx, client.B().ConfigResetstat().Build()).Error())
				run()
				b.ReportMetric(usec()/float64(n), name+"-µs/job")
			}
			b.ResetTimer()
			phase("insert", func() {
				for i := 0; i < n; i += batch {
					jobs := make([]*batondriver.JobInsert, min(batch, n-i))
					for k := range jobs {
						jobs[k] = &batondriver.JobInsert{Kind: "k", Args: []byte(`{"n":12345,"s":"hello"}`), Priority: 1, MaxAttempts: 3}
					}
					_, err := d.JobInsert(ctx, &batondriver.JobInsertParams{Queue: q, Jobs: jobs})
					require.NoError(b, err)
				}
			})
			phase("fetch", func() {
				for len(rows) < n {
					res, err := d.JobFetch(ctx, &batondriver.JobFetchParams{Queue: q, Max: batch, LeaseTTL: time.Minute})
					require.NoError(b, err)
					rows = append(rows, res.Jobs...)
				}
			})
			phase("finish", func() {
				for i := 0; i < n; i += batch {
					var fin []*batondriver.JobFinish
					for _, j := range rows[i:min(i+batch, n)] {
						fin = append(fin, &batondriver.JobFinish{JobLease: batondriver.JobLease{ID: j.ID, Lease: j.Lease}, Outcome: batondriver.JobOutcomeCompleted})
					}
					_, err := d.JobFinish(ctx, &batondriver.JobFinishParams{Queue: q, Finished: fin, Retention: 24 * time.Hour})
					require.NoError(b, err)
				}
			})
		})
	}

	// The one-key handoff: n jobs on one key of limit 1, the holder's finish
	// freeing the slot, promoting the next parked job and leasing it to the
	// caller in the same call (the path of a single-queue client's worker).
	b.Run("handoff", func(b *testing.B) {
		q := "bench" + randomHex(4)
		n := b.N + 1
		for i := 0; i < n; i += 1000 {
			jobs := make([]*batondriver.JobInsert, min(1000, n-i))
			for k := range jobs {
				jobs[k] = &batondriver.JobInsert{Kind: "k", Args: []byte(`{"n":12345,"s":"hello"}`), Priority: 1, MaxAttempts: 3,
					Key: "customer:1", Limit: 1, OnBusy: batondriver.OnBusyWait}
			}
			_, err := d.JobInsert(ctx, &batondriver.JobInsertParams{Queue: q, Jobs: jobs})
			require.NoError(b, err)
		}
		res, err := d.JobFetch(ctx, &batondriver.JobFetchParams{Queue: q, Max: 1, LeaseTTL: time.Minute})
		require.NoError(b, err)
		require.Len(b, res.Jobs, 1)
		row := res.Jobs[0]
		require.NoError(b, client.Do(ctx, client.B().ConfigResetstat().Build()).Error())
		b.ResetTimer()
		for range b.N {
			fin := []*batondriver.JobFinish{{JobLease: batondriver.JobLease{ID: row.ID, Lease: row.Lease}, Outcome: batondriver.JobOutcomeCompleted}}
			res, err := d.JobFinish(ctx, &batondriver.JobFinishParams{Queue: q, Finished: fin, Retention: 24 * time.Hour,
				Fetch: &batondriver.JobFinishFetch{Max: 1, LeaseTTL: time.Minute}})
			require.NoError(b, err)
			require.Len(b, res.Jobs, 1)
			row = res.Jobs[0]
		}
		b.ReportMetric(usec()/float64(b.N), "handoff-µs/job")
	})
}

// The wake list stays bounded while nobody pops it: past 1000 tokens it is
// cut to 500, so that a stream of inserts does not trim it every time.
func TestWakeListBounded(t *testing.T) {
	t.Parallel()
	client, d, q := jobSetup(t)
	wake := d.queueKeys(q).keys[keyWake]
	for range 17 { // 64 tokens each: the 16th call passes 1000
		jobs := make([]*batondriver.JobInsert, 64)
		for i := range jobs {
			jobs[i] = newJob("k", 0)
		}
		insertJobs(t, d, q, jobs...)
		n, err := client.Do(t.Context(), client.B().Llen().Key(wake).Build()).AsInt64()
		require.NoError(t, err)
		require.LessOrEqual(t, n, int64(1000))
	}
	n, err := client.Do(t.Context(), client.B().Llen().Key(wake).Build()).AsInt64()
	require.NoError(t, err)
	require.Equal(t, int64(500+64), n, "cut to 500 once past 1000, then one more call's tokens")
}

// A key halted (limit 0) while thousands of its jobs parked promotes them
// all when its limit is lifted: more than Lua's stack takes in one unpack
// (about 8,000 values). Lua errors are not rolled back, so a failed
// promotion would leave the jobs popped from the parked list but never
// made available.
func TestKeySetLimitPromotesThousands(t *testing.T) {
	t.Parallel()
	_, d, q := jobSetup(t)
	ctx := jobCtx(t)
	_, err := d.KeySetLimit(ctx, &batondriver.KeySetLimitParams{Queue: q, Key: "k", Limit: 0})
	require.NoError(t, err)
	const n = 9000
	jobs := make([]*batondriver.JobInsert, n)
	for i := range jobs {
		jobs[i] = newJob("k", 0)
		jobs[i].Key, jobs[i].Limit = "k", n
	}
	insertJobs(t, d, q, jobs...)
	info, err := d.KeySetLimit(ctx, &batondriver.KeySetLimitParams{Queue: q, Key: "k", Reset: true})
	require.NoError(t, err)
	require.Equal(t, n, info.Holding)
	require.Zero(t, info.Parked)
	stats, err := d.QueueStats(ctx, &batondriver.QueueParams{Queue: q})
	require.NoError(t, err)
	require.Equal(t, n, stats.Counts[batondriver.JobStateAvailable])
	require.Zero(t, stats.Counts[batondriver.JobStateParked])
}

// A job whose lease expires on its last attempt is dead, and releases its
// unique claim in the same step, as every ending does
// (docs/redis-keys.md): the claim must not stay in the unique hash, which
// nothing else would clean. (Through the driver a claim of a dead job is
// hard to see: a twin of its own scope conflicts with nothing, as the twin
// is not queued or running; only a period insert, or a job unique while
// queued that would take the key back, shows it. The hash shows it always.)
func TestExpiredLastAttemptReleasesUniqueClaim(t *testing.T) {
	t.Parallel()
	client, d, q := jobSetup(t)
	for _, scope := range []batondriver.UniqueScope{batondriver.UniqueUntilDone, batondriver.UniqueRunning} {
		j := newJob("once", 1)
		j.MaxAttempts = 1
		j.Unique = &batondriver.JobUnique{Key: "u-" + string(scope), Scope: scope}
		rows := insertJobs(t, d, q, j)
		require.Len(t, fetchJobs(t, d, q, 1, 50*time.Millisecond).Jobs, 1)
		time.Sleep(100 * time.Millisecond)
		require.Equal(t, 1, fetchJobs(t, d, q, 1, time.Minute).Recovered)
		state, _ := jobState(t, d, q, rows[0].ID)
		require.Equal(t, batondriver.JobStateDead, state)
		n, err := client.Do(jobCtx(t), client.B().Hexists().Key(d.queueKeys(q).keys[keyUnique]).Field(claimField(j.Unique)).Build()).AsInt64()
		require.NoError(t, err)
		require.Zero(t, n, "scope %s: the dead job's claim is left in the unique hash", scope)
	}
}

// A job an admin cancels leaves no claim in the unique hash, whichever way
// it ends cancelled: queued, at its outcome, or taken back when its lease
// expires. (The driver cannot see such a claim: a twin's insert ignores a
// claim whose job has ended. It would stay in the hash for good.)
func TestCancelledJobReleasesUniqueClaim(t *testing.T) {
	t.Parallel()
	client, d, q := jobSetup(t)
	ctx := jobCtx(t)
	cancel := func(id string) {
		t.Helper()
		_, err := d.JobCancel(ctx, &batondriver.JobCancelParams{Queue: q, ID: id, Reason: "stop"})
		require.NoError(t, err)
	}
	for _, tc := range []struct {
		scope batondriver.UniqueScope
		end   string
	}{
		{batondriver.UniqueQueued, "queued"},
		{batondriver.UniqueUntilDone, "queued"},
		{batondriver.UniqueUntilDone, "outcome"},
		{batondriver.UniqueRunning, "outcome"},
		{batondriver.UniqueUntilDone, "expired"},
		{batondriver.UniqueRunning, "expired"},
	} {
		j := newJob("k", 1)
		j.Unique = &batondriver.JobUnique{Key: "u-" + string(tc.scope) + "-" + tc.end, Scope: tc.scope}
		row := insertJobs(t, d, q, j)[0]
		switch tc.end {
		case "queued":
			cancel(row.ID)
		case "outcome":
			r := fetchJobs(t, d, q, 1, time.Minute).Jobs[0]
			cancel(r.ID)
			res, err := d.JobFinish(ctx, &batondriver.JobFinishParams{Queue: q, Finished: []*batondriver.JobFinish{
				{JobLease: batondriver.JobLease{ID: r.ID, Lease: r.Lease}, Outcome: batondriver.JobOutcomeRetry, Error: "x"}}})
			require.NoError(t, err)
			require.Empty(t, res.Stale)
		case "expired":
			fetchJobs(t, d, q, 1, 50*time.Millisecond)
			cancel(row.ID)
			time.Sleep(100 * time.Millisecond)
			require.Equal(t, 1, fetchJobs(t, d, q, 1, time.Minute).Recovered)
		}
		state, _ := jobState(t, d, q, row.ID)
		require.Equal(t, batondriver.JobStateCancelled, state)
		n, err := client.Do(ctx, client.B().Hexists().Key(d.queueKeys(q).keys[keyUnique]).Field(claimField(j.Unique)).Build()).AsInt64()
		require.NoError(t, err)
		require.Zero(t, n, "scope %s, cancelled %s: the claim is left in the unique hash", tc.scope, tc.end)
	}
}

// Likewise a delayed job dropped by its busy key when it comes due ends
// there, and releases its unique claim in the same step.
func TestDroppedWhenDueReleasesUniqueClaim(t *testing.T) {
	t.Parallel()
	client, d, q := jobSetup(t)
	holder := newJob("holder", 1)
	holder.Key, holder.Limit = "k", 1
	insertJobs(t, d, q, holder)
	require.Len(t, fetchJobs(t, d, q, 1, time.Minute).Jobs, 1)
	j := newJob("late", 1)
	j.Key, j.Limit, j.OnBusy = "k", 1, batondriver.OnBusyDrop
	j.RunAt = time.Now().Add(100 * time.Millisecond)
	j.Unique = &batondriver.JobUnique{Key: "u", Scope: batondriver.UniqueUntilDone}
	rows := insertJobs(t, d, q, j)
	n, err := client.Do(jobCtx(t), client.B().Hexists().Key(d.queueKeys(q).keys[keyUnique]).Field(claimField(j.Unique)).Build()).AsInt64()
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "the scheduled job claims its key")
	require.Eventually(t, func() bool {
		fetchJobs(t, d, q, 0, time.Minute) // admits it once due: dropped
		state, _ := jobState(t, d, q, rows[0].ID)
		return state == batondriver.JobStateDropped
	}, 5*time.Second, 20*time.Millisecond)
	n, err = client.Do(jobCtx(t), client.B().Hexists().Key(d.queueKeys(q).keys[keyUnique]).Field(claimField(j.Unique)).Build()).AsInt64()
	require.NoError(t, err)
	require.Zero(t, n, "the dropped job's claim is left in the unique hash")
}

// A fetch sweeps lapsed period claims out of the unique hash as well as
// out of their index: a unique key never inserted again leaves nothing. A
// fetch while the claim lasts leaves it in both, for a later fetch to
// sweep.
func TestFetchSweepsLapsedPeriodClaim(t *testing.T) {
	t.Parallel()
	client, d, q := jobSetup(t)
	const period = 200 * time.Millisecond
	j := newJob("throttled", 1)
	j.Unique = &batondriver.JobUnique{Key: "u", Scope: batondriver.UniquePeriod, Period: period}
	inserted := time.Now()
	insertJobs(t, d, q, j)
	exists := func(key string) int64 {
		n, err := client.Do(jobCtx(t), client.B().Exists().Key(key).Build()).AsInt64()
		require.NoError(t, err)
		return n
	}
	qk := d.queueKeys(q).keys
	fetchJobs(t, d, q, 0, time.Minute)
	if time.Since(inserted) < period/2 { // else the claim may have lapsed, on a loaded machine
		require.Equal(t, []int64{1, 1}, []int64{exists(qk[keyUnique]), exists(qk[keyUniquePeriods])}, "the claim is stored")
	}
	time.Sleep(period + 50*time.Millisecond)
	fetchJobs(t, d, q, 0, time.Minute)
	require.Equal(t, []int64{0, 0}, []int64{exists(qk[keyUnique]), exists(qk[keyUniquePeriods])}, "the lapsed claim is swept")
}

// One fetch does a bounded share of the queue's upkeep, so that its time on
// the server stays bounded however much piled up (docs/redis-keys.md): it
// admits at most 100 due jobs, takes back at most 100 expired leases and
// deletes at most 100 completed jobs past their retention. The next fetch
// goes on with the rest.
func TestFetchUpkeepIsBounded(t *testing.T) {
	t.Parallel()
	const batch, n = 100, 150 // BATCH in lua/joblib.lua
	pile := func(t *testing.T, set func(j *batondriver.JobInsert)) (*Driver, string) {
		t.Helper()
		_, d, q := jobSetup(t)
		jobs := make([]*batondriver.JobInsert, n)
		for i := range jobs {
			jobs[i] = newJob("k", i%10)
			if set != nil {
				set(jobs[i])
			}
		}
		insertJobs(t, d, q, jobs...)
		return d, q
	}
	counts := func(t *testing.T, d *Driver, q string) map[batondriver.JobState]int {
		t.Helper()
		stats, err := d.QueueStats(jobCtx(t), &batondriver.QueueParams{Queue: q})
		require.NoError(t, err)
		return stats.Counts
	}
	upkeep := func(t *testing.T, d *Driver, q string) *batondriver.JobFetchResult {
		t.Helper()
		return fetchJobs(t, d, q, 0, time.Minute)
	}
	// lapse waits out a time counted on the server's clock from before
	// the test's last call returned.
	lapse := func(d time.Duration) { time.Sleep(d + 50*time.Millisecond) }

	t.Run("Due", func(t *testing.T) {
		t.Parallel()
		const delay = 50 * time.Millisecond
		d, q := pile(t, func(j *batondriver.JobInsert) { j.Delay = delay })
		lapse(delay)
		upkeep(t, d, q)
		c := counts(t, d, q)
		require.Equal(t, []int{batch, n - batch}, []int{c[batondriver.JobStateAvailable], c[batondriver.JobStateScheduled]},
			"available and scheduled after one fetch")
		upkeep(t, d, q)
		require.Equal(t, n, counts(t, d, q)[batondriver.JobStateAvailable], "available after two")
	})

	t.Run("Expired", func(t *testing.T) {
		t.Parallel()
		const ttl = 50 * time.Millisecond
		d, q := pile(t, nil)
		require.Len(t, fetchJobs(t, d, q, n, ttl).Jobs, n)
		lapse(ttl)
		require.Equal(t, batch, upkeep(t, d, q).Recovered, "taken back by one fetch")
		require.Equal(t, n-batch, counts(t, d, q)[batondriver.JobStateRunning], "still running")
		require.Equal(t, n-batch, upkeep(t, d, q).Recovered, "taken back by the next")
		require.Equal(t, n, counts(t, d, q)[batondriver.JobStateAvailable])
	})

	t.Run("Completed", func(t *testing.T) {
		t.Parallel()
		const retention = 50 * time.Millisecond
		d, q := pile(t, nil)
		res := fetchJobs(t, d, q, n, time.Minute)
		require.Len(t, res.Jobs, n)
		fin := make([]*batondriver.JobFinish, n)
		for i, j := range res.Jobs {
			fin[i] = &batondriver.JobFinish{JobLease: batondriver.JobLease{ID: j.ID, Lease: j.Lease}, Outcome: batondriver.JobOutcomeCompleted}
		}
		out, err := d.JobFinish(jobCtx(t), &batondriver.JobFinishParams{Queue: q, Retention: retention, Finished: fin})
		require.NoError(t, err)
		require.Empty(t, out.Stale)
		lapse(retention)
		upkeep(t, d, q)
		require.Equal(t, n-batch, counts(t, d, q)[batondriver.JobStateCompleted], "left by one fetch")
		upkeep(t, d, q)
		require.Zero(t, counts(t, d, q)[batondriver.JobStateCompleted], "left by two")
	})
}

// The queue keys are built once per queue name, and the cache of them
// stays bounded however many names a process uses.
func TestKeyCacheBounded(t *testing.T) {
	var c keyCache
	built := 0
	build := func(q string) queueKeys {
		built++
		return queueKeys{base: q}
	}
	require.Equal(t, "a", c.get("a", build).base)
	require.Equal(t, "a", c.get("a", build).base)
	require.Equal(t, 1, built, "built again though cached")
	for i := range 3 * maxCachedQueues {
		require.Equal(t, fmt.Sprint(i), c.get(fmt.Sprint(i), build).base)
		require.LessOrEqual(t, len(c.m), maxCachedQueues)
	}
}

// A parked job whose hash is gone behind the scripts' back (evicted under
// maxmemory, deleted by hand) leaves its ID in its key's parked list, where
// no transition of the driver would leave it. Promotion skips the ID: it
// neither brings the job back, nor stops at it, and the job behind it
// takes the freed slot; the key's index (KI), which orders KeyList by the
// parked count, counts the ID out too. Promotion pops a key's free slots'
// worth at once, or head by head when its parked jobs' defaults differ
// ("mixed"): both are checked.
func TestVanishedParkedJobSkipped(t *testing.T) {
	t.Parallel()
	for _, mixed := range []bool{false, true} {
		t.Run(fmt.Sprintf("mixed=%v", mixed), func(t *testing.T) {
			t.Parallel()
			client, d, q := jobSetup(t)
			ctx := jobCtx(t)
			keyed := func(k string, limit int) *batondriver.JobInsert {
				j := newJob("k", 0)
				j.Key, j.Limit = k, limit
				return j
			}
			behind := 1
			if mixed {
				behind = 2 // parked behind a default of 1: the key's defaults are mixed
			}
			rows := insertJobs(t, d, q, keyed("b", 1), keyed("b", 1), keyed("b", behind), keyed("a", 1))
			for i, want := range []batondriver.JobState{batondriver.JobStateAvailable, batondriver.JobStateParked,
				batondriver.JobStateParked, batondriver.JobStateAvailable} {
				require.Equal(t, want, rows[i].State, "job %d", i)
			}
			gone := rows[1].ID
			require.NoError(t, client.Do(ctx, client.B().Del().Key(d.queueKeys(q).job(gone)).Build()).Error())

			held := fetchJobs(t, d, q, 2, time.Minute).Jobs
			require.Equal(t, []string{rows[0].ID, rows[3].ID}, ids(held))
			res, err := d.JobFinish(ctx, &batondriver.JobFinishParams{Queue: q, Retention: time.Hour,
				Finished: []*batondriver.JobFinish{{JobLease: batondriver.JobLease{ID: held[0].ID, Lease: held[0].Lease},
					Outcome: batondriver.JobOutcomeCompleted}}})
			require.NoError(t, err)
			require.Empty(t, res.Stale)

			_, err = d.JobGet(ctx, &batondriver.JobGetParams{Queue: q, ID: gone})
			require.ErrorIs(t, err, batondriver.ErrJobNotFound, "the vanished job came back")
			info, err := d.KeyGet(ctx, &batondriver.KeyParams{Queue: q, Key: "b"})
			require.NoError(t, err)
			require.Equal(t, 1, info.Holding)
			require.Equal(t, rows[2].ID, info.Holders[0].ID, "the job behind the vanished one promoted")
			require.Equal(t, batondriver.JobStateAvailable, info.Holders[0].State)
			require.Zero(t, info.Parked)
			// Nothing parked on either key: KeyList orders them by name.
			list, err := d.KeyList(ctx, &batondriver.KeyListParams{Queue: q, Limit: 10})
			require.NoError(t, err)
			var names []string
			for _, k := range list.Keys {
				names = append(names, k.Key)
			}
			require.Equal(t, []string{"a", "b"}, names, "KeyList's order: the keys' index counts the vanished job out")
		})
	}
}
