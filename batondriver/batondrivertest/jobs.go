package batondrivertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
)

// Tolerances for comparing times. The backend's clock is not the test's (it
// may be a server's), and a backend may store times to the millisecond.
const (
	clockSlack = time.Second          // a backend's "now" against the test's
	storeSlack = 2 * time.Millisecond // a time given to the backend against the one it stores
	waitFor    = 3 * time.Second      // how long an eventual change may take
)

// unknownID is well-formed but names no job.
const unknownID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"

// jobFixture is one test's driver and queue with helpers around them.
type jobFixture struct {
	t     *testing.T
	d     batondriver.JobDriver
	ctx   context.Context
	queue string
}

func newJobFixture(t *testing.T, newDriver func(t *testing.T) batondriver.JobDriver) *jobFixture {
	t.Parallel()
	return &jobFixture{t: t, d: newDriver(t), ctx: t.Context(), queue: uniqueQueue()}
}

// uniqueQueue returns a queue name no other test uses.
func uniqueQueue() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "q" + hex.EncodeToString(b)
}

// newJob returns a job to insert: priority 1, 3 attempts, available now.
func newJob() *batondriver.JobInsert {
	return &batondriver.JobInsert{Kind: "test", Args: []byte(`{"n":1}`), Priority: 1, MaxAttempts: 3}
}

// withJob returns newJob changed by set.
func withJob(set func(j *batondriver.JobInsert)) *batondriver.JobInsert {
	j := newJob()
	set(j)
	return j
}

func (f *jobFixture) insert(jobs ...*batondriver.JobInsert) []*batondriver.JobRow {
	f.t.Helper()
	res, err := f.d.JobInsert(f.ctx, &batondriver.JobInsertParams{Queue: f.queue, Jobs: jobs})
	require.NoError(f.t, err)
	require.Len(f.t, res.Jobs, len(jobs))
	return res.Jobs
}

func (f *jobFixture) insertOne(j *batondriver.JobInsert) *batondriver.JobRow {
	f.t.Helper()
	return f.insert(j)[0]
}

// fetchP fetches from the fixture's queue; p.Queue is filled in.
func (f *jobFixture) fetchP(p batondriver.JobFetchParams) *batondriver.JobFetchResult {
	f.t.Helper()
	p.Queue = f.queue
	res, err := f.d.JobFetch(f.ctx, &p)
	require.NoError(f.t, err)
	leased := 0 // chained jobs come on top of Max
	for _, j := range res.Jobs {
		if j.After == "" {
			leased++
		} else {
			require.True(f.t, p.Chain, "a chained job unasked for")
		}
	}
	require.LessOrEqual(f.t, leased, p.Max)
	return res
}

// fetch leases up to max jobs for 10s.
func (f *jobFixture) fetch(max int) *batondriver.JobFetchResult {
	f.t.Helper()
	return f.fetchP(batondriver.JobFetchParams{Max: max, LeaseTTL: 10 * time.Second})
}

// fetchOne leases exactly one job for ttl.
func (f *jobFixture) fetchOne(ttl time.Duration) *batondriver.JobRow {
	f.t.Helper()
	res := f.fetchP(batondriver.JobFetchParams{Max: 1, LeaseTTL: ttl})
	require.Len(f.t, res.Jobs, 1, "no job fetched")
	return res.Jobs[0]
}

func (f *jobFixture) get(id string) *batondriver.JobRow {
	f.t.Helper()
	row, err := f.d.JobGet(f.ctx, &batondriver.JobGetParams{Queue: f.queue, ID: id})
	require.NoError(f.t, err)
	require.Equal(f.t, id, row.ID)
	require.Equal(f.t, f.queue, row.Queue)
	return row
}

func (f *jobFixture) requireGone(id string) {
	f.t.Helper()
	_, err := f.d.JobGet(f.ctx, &batondriver.JobGetParams{Queue: f.queue, ID: id})
	require.ErrorIs(f.t, err, batondriver.ErrJobNotFound)
}

// finish records outcomes with the given completed-job retention and
// returns the stale IDs.
func (f *jobFixture) finish(retention time.Duration, fs ...*batondriver.JobFinish) []string {
	f.t.Helper()
	res, err := f.d.JobFinish(f.ctx, &batondriver.JobFinishParams{Queue: f.queue, Finished: fs, Retention: retention})
	require.NoError(f.t, err)
	return res.Stale
}

// outcome is the outcome of row's attempt, presenting row's lease.
func outcome(row *batondriver.JobRow, o batondriver.JobOutcome, msg string, runAt time.Time) *batondriver.JobFinish {
	return &batondriver.JobFinish{JobLease: lease(row), Outcome: o, Error: msg, RunAt: runAt}
}

func lease(row *batondriver.JobRow) batondriver.JobLease {
	return batondriver.JobLease{ID: row.ID, Lease: row.Lease}
}

// complete records row's success, keeping the job an hour.
func (f *jobFixture) complete(row *batondriver.JobRow) {
	f.t.Helper()
	require.Empty(f.t, f.finish(time.Hour, outcome(row, batondriver.JobOutcomeCompleted, "", time.Time{})))
}

func (f *jobFixture) extend(ttl time.Duration, ls ...batondriver.JobLease) *batondriver.JobExtendResult {
	f.t.Helper()
	res, err := f.d.JobExtend(f.ctx, &batondriver.JobExtendParams{Queue: f.queue, Leases: ls, TTL: ttl})
	require.NoError(f.t, err)
	return res
}

func (f *jobFixture) list(state batondriver.JobState, limit, offset int) *batondriver.JobListResult {
	f.t.Helper()
	res, err := f.d.JobList(f.ctx, &batondriver.JobListParams{Queue: f.queue, State: state, Limit: limit, Offset: offset})
	require.NoError(f.t, err)
	for _, row := range res.Jobs {
		require.Equal(f.t, state, row.State)
	}
	return res
}

func (f *jobFixture) stats() *batondriver.QueueStatsResult {
	f.t.Helper()
	res, err := f.d.QueueStats(f.ctx, &batondriver.QueueParams{Queue: f.queue})
	require.NoError(f.t, err)
	require.Equal(f.t, f.queue, res.Queue)
	return res
}

// counts asserts the queue's counts, in the order of jobStates, for a
// queue with no parked or dropped jobs.
func (f *jobFixture) counts(scheduled, available, running, completed, cancelled, dead int) {
	f.t.Helper()
	require.Equal(f.t, map[batondriver.JobState]int{
		batondriver.JobStateParked:    0,
		batondriver.JobStateDropped:   0,
		batondriver.JobStateScheduled: scheduled,
		batondriver.JobStateAvailable: available,
		batondriver.JobStateRunning:   running,
		batondriver.JobStateCompleted: completed,
		batondriver.JobStateCancelled: cancelled,
		batondriver.JobStateDead:      dead,
	}, f.stats().Counts)
}

func (f *jobFixture) pause(resume bool) {
	f.t.Helper()
	require.NoError(f.t, f.d.QueuePause(f.ctx, &batondriver.QueuePauseParams{Queue: f.queue, Resume: resume}))
}

func (f *jobFixture) retry(id string) (*batondriver.JobRow, error) {
	return f.d.JobRetry(f.ctx, &batondriver.JobGetParams{Queue: f.queue, ID: id})
}

func (f *jobFixture) del(id string) error {
	return f.d.JobDelete(f.ctx, &batondriver.JobGetParams{Queue: f.queue, ID: id})
}

// wait calls JobWait in a goroutine; the channel yields its error and how
// long it took.
func (f *jobFixture) wait(ctx context.Context, timeout time.Duration) <-chan waited {
	ch := make(chan waited, 1)
	go func() {
		start := time.Now()
		err := f.d.JobWait(ctx, &batondriver.JobWaitParams{Queue: f.queue, Timeout: timeout})
		ch <- waited{err, time.Since(start)}
	}()
	return ch
}

type waited struct {
	err  error
	took time.Duration
}

// waitResult receives a wait's result, boundedly.
func (f *jobFixture) waitResult(ch <-chan waited) waited {
	f.t.Helper()
	select {
	case w := <-ch:
		return w
	case <-time.After(10 * time.Second):
		f.t.Fatal("JobWait did not return within 10s")
		return waited{}
	}
}

// takeWakes takes every wake token the queue holds and returns how many
// there were: it calls JobWait, one call at a time, until one times out.
// A call that finds a token returns at once; one that times out took its
// whole Timeout.
func (f *jobFixture) takeWakes() int {
	f.t.Helper()
	const timeout = 200 * time.Millisecond
	for n := 0; n < 100; n++ {
		w := f.waitResult(f.wait(f.ctx, timeout))
		require.NoError(f.t, w.err)
		if w.took >= timeout-20*time.Millisecond {
			return n
		}
	}
	f.t.Fatal("wake tokens without end")
	return 0
}

// eventually calls cond every 10ms until it is true, or fails the test
// after waitFor. cond runs on the test's goroutine, so it may use require.
func (f *jobFixture) eventually(what string, cond func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			f.t.Fatalf("%s: not within %v", what, waitFor)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// recover fetches (leasing nothing, or the recovered job) until an expired
// lease has been taken back, and returns that fetch's result.
func (f *jobFixture) recover(p batondriver.JobFetchParams) *batondriver.JobFetchResult {
	f.t.Helper()
	var res *batondriver.JobFetchResult
	f.eventually("expired lease taken back", func() bool {
		res = f.fetchP(p)
		return res.Recovered > 0
	})
	require.Equal(f.t, 1, res.Recovered)
	return res
}

func requireNear(t *testing.T, want, got time.Time, slack time.Duration, msgAndArgs ...any) {
	t.Helper()
	require.False(t, got.IsZero(), msgAndArgs...)
	require.WithinDuration(t, want, got, slack, msgAndArgs...)
}

func ids(rows []*batondriver.JobRow) []string {
	out := []string{}
	for _, r := range rows {
		out = append(out, r.ID)
	}
	return out
}

func exerciseJobs(t *testing.T, newDriver func(t *testing.T) batondriver.JobDriver) {
	t.Run("InsertAvailable", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		in := &batondriver.JobInsert{
			Kind: "email", Args: []byte(`{"to":"a@b.c"}`), Priority: 3, MaxAttempts: 5,
			Tags: []string{"x", "y"}, Metadata: []byte(`{"m":1}`),
		}
		r := f.insertOne(in)
		now := time.Now()
		require.NotEmpty(t, r.ID)
		require.Equal(t, f.queue, r.Queue)
		require.Equal(t, "email", r.Kind)
		require.Equal(t, `{"to":"a@b.c"}`, string(r.Args))
		require.Equal(t, 3, r.Priority)
		require.Equal(t, 5, r.MaxAttempts)
		require.Equal(t, []string{"x", "y"}, r.Tags)
		require.Equal(t, `{"m":1}`, string(r.Metadata))
		require.Equal(t, batondriver.JobStateAvailable, r.State)
		require.Zero(t, r.Attempt)
		requireNear(t, now, r.CreatedAt, clockSlack)
		requireNear(t, now, r.RunAt, clockSlack)
		require.True(t, r.AttemptedAt.IsZero())
		require.True(t, r.FinishedAt.IsZero())
		require.Empty(t, r.Errors)
		require.Empty(t, r.Lease)
		require.True(t, r.LeaseUntil.IsZero())

		g := f.get(r.ID)
		require.Equal(t, r.Kind, g.Kind)
		require.Equal(t, string(r.Args), string(g.Args))
		require.Equal(t, r.Priority, g.Priority)
		require.Equal(t, r.MaxAttempts, g.MaxAttempts)
		require.Equal(t, r.Tags, g.Tags)
		require.Equal(t, string(r.Metadata), string(g.Metadata))
		require.Equal(t, r.State, g.State)
		requireNear(t, r.CreatedAt, g.CreatedAt, storeSlack)
		requireNear(t, r.RunAt, g.RunAt, storeSlack)
		f.counts(0, 1, 0, 0, 0, 0)
	})

	// Tags and metadata are each stored when given and absent when not, in
	// every combination, for jobs available and scheduled alike.
	t.Run("InsertTagsAndMetadataApart", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		later := time.Now().Add(time.Hour)
		var jobs []*batondriver.JobInsert
		for _, at := range []time.Time{{}, later} {
			for _, tags := range [][]string{nil, {"t"}} {
				for _, meta := range [][]byte{nil, []byte(`{"m":1}`)} {
					jobs = append(jobs, withJob(func(j *batondriver.JobInsert) { j.RunAt, j.Tags, j.Metadata = at, tags, meta }))
				}
			}
		}
		rows := f.insert(jobs...)
		for i, in := range jobs {
			g := f.get(rows[i].ID)
			require.Equal(t, in.Tags, g.Tags, "job %d", i)
			require.Equal(t, string(in.Metadata), string(g.Metadata), "job %d", i)
			want := batondriver.JobStateAvailable
			if !in.RunAt.IsZero() {
				want = batondriver.JobStateScheduled
			}
			require.Equal(t, want, g.State, "job %d", i)
		}
		f.counts(4, 4, 0, 0, 0, 0)
	})

	// An insert of no jobs answers with empty lists, not nil ones, on
	// every backend, and changes nothing.
	t.Run("InsertOfNone", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		res, err := f.d.JobInsert(f.ctx, &batondriver.JobInsertParams{Queue: f.queue})
		require.NoError(t, err)
		require.Equal(t, []*batondriver.JobRow{}, res.Jobs)
		require.Equal(t, []batondriver.JobInsertStatus{}, res.Status)
		require.Equal(t, []string{}, res.Reason)
		f.counts(0, 0, 0, 0, 0, 0)
	})

	t.Run("InsertOncePerTick", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		tick := time.Now().Truncate(time.Second).Add(time.Hour)
		once := func(name string, at time.Time) *batondriver.JobInsertResult {
			t.Helper()
			res, err := f.d.JobInsert(f.ctx, &batondriver.JobInsertParams{
				Queue: f.queue, Jobs: []*batondriver.JobInsert{newJob()},
				Once: &batondriver.JobInsertOnce{Name: name, Tick: at},
			})
			require.NoError(t, err)
			return res
		}
		first := once("every-15m", tick)
		require.False(t, first.Skipped)
		require.Len(t, first.Jobs, 1)
		for _, at := range []time.Time{tick, tick.Add(-time.Minute)} {
			again := once("every-15m", at)
			require.True(t, again.Skipped, "a tick not after the last one inserted again")
			require.Empty(t, again.Jobs)
			require.True(t, tick.Equal(again.LastTick), "the last tick inserted: %v", again.LastTick)
		}
		require.False(t, once("other", tick).Skipped, "schedules are told apart by name")
		next := tick.Add(15 * time.Minute)
		require.False(t, once("every-15m", next).Skipped)
		late := once("every-15m", tick)
		require.True(t, late.Skipped)
		require.True(t, next.Equal(late.LastTick), "a caller come late learns a later tick was inserted: %v", late.LastTick)
		f.counts(0, 3, 0, 0, 0, 0)

		_, err := f.d.JobInsert(f.ctx, &batondriver.JobInsertParams{
			Queue: f.queue, Jobs: []*batondriver.JobInsert{newJob()}, Once: &batondriver.JobInsertOnce{Tick: tick},
		})
		require.ErrorIs(t, err, batondriver.ErrBadParams, "Once without a name")
	})

	t.Run("InsertOfEarliestScheduledJobWakes", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.insertOne(withJob(func(j *batondriver.JobInsert) { j.RunAt = time.Now().Add(time.Hour) }))
		f.fetch(1) // finds nothing available, and drops the wake-up the insert left
		ch := f.wait(f.ctx, 2*time.Second)
		time.Sleep(20 * time.Millisecond) // let it block
		// Due before the other: a fetcher must learn the new NextRunAt.
		f.insertOne(withJob(func(j *batondriver.JobInsert) { j.RunAt = time.Now().Add(time.Minute) }))
		w := f.waitResult(ch)
		require.NoError(t, w.err)
		require.Less(t, w.took, time.Second, "the waiter slept through a new earliest job")
		// Due after the earliest: nobody needs to know yet.
		f.fetch(1)
		ch = f.wait(f.ctx, 200*time.Millisecond)
		time.Sleep(20 * time.Millisecond)
		f.insertOne(withJob(func(j *batondriver.JobInsert) { j.RunAt = time.Now().Add(2 * time.Hour) }))
		w = f.waitResult(ch)
		require.NoError(t, w.err)
		require.GreaterOrEqual(t, w.took, 150*time.Millisecond, "a later scheduled job woke a waiter")
	})

	t.Run("FirstScheduledJobWakes", func(t *testing.T) {
		// A job scheduled into a queue with nothing scheduled is its
		// earliest: a waiting fetcher is woken to learn its NextRunAt.
		f := newJobFixture(t, newDriver)
		f.requireWakes("the first scheduled job", func() {
			f.insertOne(withJob(func(j *batondriver.JobInsert) { j.RunAt = time.Now().Add(time.Hour) }))
		})
	})

	// So too for a job an outcome schedules (a retry, a snooze, an Again
	// with a delay): another process waiting on the queue learns when it
	// is due, not only the one that finished it. One scheduled after the
	// earliest wakes nobody.
	t.Run("OutcomeScheduledEarliestWakes", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.insertOne(withJob(func(j *batondriver.JobInsert) { j.RunAt = time.Now().Add(2 * time.Hour) }))
		f.insert(newJob(), newJob(), newJob(), newJob())
		got := f.fetch(4).Jobs
		require.Len(t, got, 4)
		f.drainWakes()
		f.done(got[0], batondriver.JobOutcomeRetry, time.Now().Add(3*time.Hour))
		require.Zero(t, f.takeWakes(), "a retry due after the earliest scheduled job woke a fetcher")
		for i, o := range []batondriver.JobOutcome{batondriver.JobOutcomeRetry, batondriver.JobOutcomeSnooze, batondriver.JobOutcomeAgain} {
			at := time.Now().Add(time.Hour - time.Duration(i)*time.Minute)
			f.requireWakes(string(o)+" scheduled before every other job", func() { f.done(got[i+1], o, at) })
		}
	})

	// So too for a job whose lease a fetch takes back and retries after
	// RecoverDelay, whether the fetch leases (Max 1) or only keeps the
	// queue (Max 0, a pool with every worker busy): nobody knew of it as
	// scheduled. One due after the earliest wakes nobody.
	t.Run("RecoveredRetryScheduledEarliestWakes", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.insertOne(withJob(func(j *batondriver.JobInsert) { j.RunAt = time.Now().Add(3 * time.Hour) }))
		expire := func() {
			t.Helper()
			f.insertOne(newJob())
			require.Len(t, f.fetchP(batondriver.JobFetchParams{Max: 1, LeaseTTL: 50 * time.Millisecond}).Jobs, 1)
		}
		for i, max := range []int{1, 0} {
			expire()
			delay := 2*time.Hour - time.Duration(i)*time.Minute
			f.requireWakes(fmt.Sprintf("a lease taken back by a fetch of Max %d, retried before every other job", max), func() {
				f.recover(batondriver.JobFetchParams{Max: max, LeaseTTL: 10 * time.Second, RecoverDelay: delay})
			})
		}
		expire()
		f.drainWakes()
		f.recover(batondriver.JobFetchParams{Max: 1, LeaseTTL: 10 * time.Second, RecoverDelay: 4 * time.Hour})
		require.Zero(t, f.takeWakes(), "a recovered lease retried after the earliest scheduled job woke a fetcher")
		f.counts(4, 0, 0, 0, 0, 0)
	})

	// A fetcher sleeps until the earliest run time it learnt: a job due at
	// that very time, or a job due then moved later (a debounce), changes
	// nothing it needs to know, and wakes nobody, whether inserted,
	// scheduled by an outcome or moved. A job due a millisecond before
	// wakes one. (Times are whole milliseconds, as every backend stores
	// them.)
	t.Run("ScheduledAtTheEarliestWakesNobody", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
		dueAt := func(at time.Time, set ...func(j *batondriver.JobInsert)) *batondriver.JobInsert {
			return withJob(func(j *batondriver.JobInsert) {
				j.RunAt = at
				for _, s := range set {
					s(j)
				}
			})
		}
		f.insert(dueAt(at), newJob())
		r := f.fetchOne(10 * time.Second)
		require.Empty(t, f.fetch(1).Jobs) // drops the insert's wake-ups
		f.insertOne(dueAt(at))
		require.Zero(t, f.takeWakes(), "a job inserted due at the earliest's time woke a fetcher")
		f.done(r, batondriver.JobOutcomeRetry, at)
		require.Zero(t, f.takeWakes(), "a retry due at the earliest's time woke a fetcher")

		// A debounced job, the queue's earliest, moved later: nobody
		// oversleeps it. Moved before the earliest, it wakes one.
		u := uniqueKey(t)
		sooner := at.Add(-time.Minute)
		d := f.insertOne(dueAt(sooner, uniq(u, untilDone, replace)))
		f.drainWakes()
		row, _ := f.insertAs(batondriver.JobReplaced, dueAt(sooner.Add(30*time.Second), uniq(u, untilDone, replace)))
		require.Equal(t, d.ID, row.ID)
		require.Zero(t, f.takeWakes(), "the earliest job, moved later, woke a fetcher")
		f.requireWakes("a job moved before every other", func() {
			f.insertAs(batondriver.JobReplaced, dueAt(sooner.Add(-time.Second), uniq(u, untilDone, replace)))
		})
		f.requireWakes("a job inserted due a millisecond before the earliest", func() {
			f.insertOne(dueAt(sooner.Add(-time.Second - time.Millisecond)))
		})
		f.counts(5, 0, 0, 0, 0, 0)
	})

	t.Run("DeadRetentionSweepsDeadSet", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		rows := f.insert(newJob(), newJob())
		res := f.fetch(2)
		require.Len(t, res.Jobs, 2)
		f.finish(0,
			outcome(res.Jobs[0], batondriver.JobOutcomeDead, "gone", time.Time{}),
			outcome(res.Jobs[1], batondriver.JobOutcomeCancel, "stop", time.Time{}))
		f.fetchP(batondriver.JobFetchParams{Max: 1, LeaseTTL: time.Second}) // no retention: kept
		f.counts(0, 0, 0, 0, 1, 1)
		time.Sleep(60 * time.Millisecond)
		f.fetchP(batondriver.JobFetchParams{Max: 1, LeaseTTL: time.Second, DeadRetention: time.Hour})
		f.counts(0, 0, 0, 0, 1, 1)
		f.fetchP(batondriver.JobFetchParams{Max: 1, LeaseTTL: time.Second, DeadRetention: 30 * time.Millisecond})
		f.counts(0, 0, 0, 0, 0, 0)
		f.requireGone(rows[0].ID)
		f.requireGone(rows[1].ID)
	})

	t.Run("InsertScheduled", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		at := time.Now().Add(time.Hour)
		r := f.insertOne(withJob(func(j *batondriver.JobInsert) { j.RunAt = at }))
		require.Equal(t, batondriver.JobStateScheduled, r.State)
		requireNear(t, at, r.RunAt, storeSlack)
		g := f.get(r.ID)
		require.Equal(t, batondriver.JobStateScheduled, g.State)
		requireNear(t, at, g.RunAt, storeSlack)
		res := f.fetch(10)
		require.Empty(t, res.Jobs, "a job was fetched before its RunAt")
		requireNear(t, at, res.NextRunAt, storeSlack)
		// The backend's clock at the fetch, which a fetcher measures
		// NextRunAt from.
		requireNear(t, time.Now(), res.Now, clockSlack)
		f.counts(1, 0, 0, 0, 0, 0)
	})

	t.Run("InsertDelayOnBackendClock", func(t *testing.T) {
		// A Delay counts from the backend's clock at the insert: RunAt is
		// CreatedAt plus the delay exactly (both the backend's).
		f := newJobFixture(t, newDriver)
		r := f.insertOne(withJob(func(j *batondriver.JobInsert) { j.Delay = time.Hour }))
		require.Equal(t, batondriver.JobStateScheduled, r.State)
		g := f.get(r.ID)
		require.Equal(t, time.Hour, g.RunAt.Sub(g.CreatedAt), "RunAt %v, CreatedAt %v", g.RunAt, g.CreatedAt)
		require.True(t, g.RunAt.Equal(r.RunAt), "the insert's row says RunAt %v, not %v", r.RunAt, g.RunAt)
		require.Empty(t, f.fetch(10).Jobs, "a job was fetched before its delay")
		// A delay of a fraction of a millisecond is at least that long.
		r = f.insertOne(withJob(func(j *batondriver.JobInsert) { j.Delay = time.Microsecond }))
		g = f.get(r.ID)
		require.Greater(t, g.RunAt.Sub(g.CreatedAt), time.Duration(0))
		for _, bad := range []func(j *batondriver.JobInsert){
			func(j *batondriver.JobInsert) { j.Delay = -time.Second },
			func(j *batondriver.JobInsert) { j.Delay, j.RunAt = time.Second, time.Now().Add(time.Hour) },
		} {
			_, err := f.d.JobInsert(f.ctx, &batondriver.JobInsertParams{Queue: f.queue, Jobs: []*batondriver.JobInsert{withJob(bad)}})
			require.ErrorIs(t, err, batondriver.ErrBadParams)
		}
	})

	t.Run("InsertPastRunAtIsAvailable", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		r := f.insertOne(withJob(func(j *batondriver.JobInsert) { j.RunAt = time.Now().Add(-time.Hour) }))
		require.Equal(t, batondriver.JobStateAvailable, r.State)
		require.Equal(t, r.ID, f.fetchOne(10*time.Second).ID)
	})

	t.Run("IDsUniqueAndTimeOrdered", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		var batches [][]string
		seen := map[string]bool{}
		for i := range 3 {
			if i > 0 {
				time.Sleep(3 * time.Millisecond) // IDs are ordered to the millisecond
			}
			batch := ids(f.insert(newJob(), newJob(), newJob(), newJob(), newJob()))
			for _, id := range batch {
				require.False(t, seen[id], "duplicate ID %s", id)
				seen[id] = true
			}
			batches = append(batches, batch)
		}
		for i := 1; i < len(batches); i++ {
			require.Greater(t, slices.Min(batches[i]), slices.Max(batches[i-1]), "IDs of a later insert sort before an earlier one's")
		}
	})

	t.Run("FetchOrder", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		prios := []int{5, 1, 9, 0, 1, 5, 0}
		var jobs []*batondriver.JobInsert
		for _, p := range prios {
			jobs = append(jobs, withJob(func(j *batondriver.JobInsert) { j.Priority = p }))
		}
		rows := f.insert(jobs...)
		late := f.insertOne(withJob(func(j *batondriver.JobInsert) { j.Priority = 0 }))
		want := []string{rows[3].ID, rows[6].ID, late.ID, rows[1].ID, rows[4].ID, rows[0].ID, rows[5].ID, rows[2].ID}
		got := ids(f.fetch(3).Jobs)
		for range 5 {
			got = append(got, f.fetchOne(10*time.Second).ID)
		}
		require.Equal(t, want, got, "fetch order must be priority, then arrival")
		require.Empty(t, f.fetch(10).Jobs)
	})

	t.Run("FetchMax", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.insert(newJob(), newJob(), newJob(), newJob(), newJob(), newJob())
		res := f.fetch(2)
		require.Len(t, res.Jobs, 2)
		require.True(t, res.More, "Max jobs taken and more available")
		res = f.fetch(3)
		require.Len(t, res.Jobs, 3)
		require.True(t, res.More)
		res = f.fetch(1)
		require.Len(t, res.Jobs, 1)
		require.False(t, res.More, "Max jobs taken, none left")
		require.Empty(t, f.fetch(10).Jobs)
		f.counts(0, 0, 6, 0, 0, 0)
	})

	t.Run("FetchLeases", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		ins := f.insert(newJob(), newJob())
		res := f.fetch(10)
		now := time.Now()
		require.Len(t, res.Jobs, 2)
		require.ElementsMatch(t, ids(ins), ids(res.Jobs))
		require.False(t, res.Paused)
		require.Zero(t, res.Recovered)
		require.True(t, res.NextRunAt.IsZero())
		for _, r := range res.Jobs {
			require.Equal(t, batondriver.JobStateRunning, r.State)
			require.Equal(t, 1, r.Attempt)
			require.NotEmpty(t, r.Lease)
			requireNear(t, now, r.AttemptedAt, clockSlack)
			requireNear(t, now.Add(10*time.Second), r.LeaseUntil, clockSlack)
			g := f.get(r.ID)
			require.Equal(t, batondriver.JobStateRunning, g.State)
			require.Equal(t, 1, g.Attempt)
			requireNear(t, r.LeaseUntil, g.LeaseUntil, storeSlack)
		}
		require.NotEqual(t, res.Jobs[0].Lease, res.Jobs[1].Lease, "leases must differ")
		require.Empty(t, f.fetch(10).Jobs, "a leased job was fetched again")
	})

	t.Run("FetchUnknownQueue", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		res := f.fetch(10)
		require.Empty(t, res.Jobs)
		require.False(t, res.Paused)
		require.Zero(t, res.Recovered)
		require.True(t, res.NextRunAt.IsZero())
	})

	// A fetch of no job leases nothing but does the upkeep: a due job is
	// admitted.
	t.Run("FetchOfNoJobDoesUpkeep", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		// Due in 300ms, not less: on a loaded machine the insert itself
		// may take longer than a shorter delay (seen with 50ms).
		r := f.insertOne(withJob(func(j *batondriver.JobInsert) { j.RunAt = time.Now().Add(300 * time.Millisecond) }))
		require.Equal(t, batondriver.JobStateScheduled, f.get(r.ID).State)
		time.Sleep(350 * time.Millisecond)
		res := f.fetch(0)
		require.Empty(t, res.Jobs)
		require.Equal(t, batondriver.JobStateAvailable, f.get(r.ID).State, "a fetch of no job did not admit a due job")
		require.True(t, res.More, "a job is available")
	})

	t.Run("ScheduledBecomesAvailable", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		const delay = 200 * time.Millisecond
		start := time.Now()
		at := start.Add(delay)
		r := f.insertOne(withJob(func(j *batondriver.JobInsert) { j.RunAt = at }))
		res := f.fetch(1)
		if time.Since(start) < delay-20*time.Millisecond {
			require.Empty(t, res.Jobs, "fetched before its RunAt")
			requireNear(t, at, res.NextRunAt, storeSlack)
		}
		var got *batondriver.JobRow
		f.eventually("scheduled job fetched", func() bool {
			res = f.fetch(1)
			if len(res.Jobs) == 0 {
				return false
			}
			got = res.Jobs[0]
			return true
		})
		require.False(t, time.Now().Before(at.Add(-20*time.Millisecond)), "fetched %v before its RunAt", time.Until(at))
		require.Equal(t, r.ID, got.ID)
		require.Equal(t, 1, got.Attempt)
		requireNear(t, at, got.RunAt, storeSlack)
		require.True(t, res.NextRunAt.IsZero(), "NextRunAt with nothing scheduled")
	})

	t.Run("NextRunAt", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		first, second := time.Now().Add(time.Hour), time.Now().Add(2*time.Hour)
		f.insert(
			withJob(func(j *batondriver.JobInsert) { j.RunAt = second }),
			withJob(func(j *batondriver.JobInsert) { j.RunAt = first }),
			newJob(),
		)
		res := f.fetch(10)
		require.Len(t, res.Jobs, 1)
		requireNear(t, first, res.NextRunAt, storeSlack)
	})

	t.Run("DueJobsAdmittedInRunAtOrderAndNoOthers", func(t *testing.T) {
		// A fetch makes the due scheduled jobs available earliest run_at
		// first, whatever order they were inserted in, and leaves the jobs
		// not yet due scheduled. The delays count on the backend's clock,
		// so all three are due once the test has waited the longest.
		f := newJobFixture(t, newDriver)
		delayed := func(d time.Duration) *batondriver.JobInsert {
			return withJob(func(j *batondriver.JobInsert) { j.Delay = d })
		}
		rows := f.insert(delayed(300*time.Millisecond), delayed(100*time.Millisecond), delayed(200*time.Millisecond),
			delayed(time.Hour))
		time.Sleep(400 * time.Millisecond)
		res := f.fetch(10)
		require.Equal(t, []string{rows[1].ID, rows[2].ID, rows[0].ID}, ids(res.Jobs), "leased in run_at order")
		f.requireState(scheduled, rows[3].ID)
		requireNear(t, rows[3].RunAt, res.NextRunAt, storeSlack)
		f.counts(1, 0, 3, 0, 0, 0)
	})

	t.Run("ExpiredLeaseRecovered", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		r := f.insertOne(newJob())
		first := f.fetchOne(50 * time.Millisecond)
		var got *batondriver.JobRow
		recovered := 0
		f.eventually("expired job fetched again", func() bool {
			res := f.fetch(1)
			recovered += res.Recovered
			if len(res.Jobs) == 0 {
				return false
			}
			got = res.Jobs[0]
			return true
		})
		require.Equal(t, 1, recovered)
		require.Equal(t, r.ID, got.ID)
		require.Equal(t, 2, got.Attempt, "the expired attempt must stay counted")
		require.NotEqual(t, first.Lease, got.Lease)
		require.Len(t, got.Errors, 1)
		require.Equal(t, 1, got.Errors[0].Attempt)
		require.Equal(t, "lease expired", got.Errors[0].Error)
		requireNear(t, time.Now(), got.Errors[0].At, clockSlack)
	})

	t.Run("RecoverDelay", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		r := f.insertOne(newJob())
		f.fetchOne(50 * time.Millisecond)
		res := f.recover(batondriver.JobFetchParams{Max: 1, LeaseTTL: 10 * time.Second, RecoverDelay: time.Hour})
		require.Empty(t, res.Jobs, "a job recovered with a delay was fetched at once")
		g := f.get(r.ID)
		require.Equal(t, batondriver.JobStateScheduled, g.State)
		require.Equal(t, 1, g.Attempt)
		require.Empty(t, g.Lease)
		requireNear(t, time.Now().Add(time.Hour), g.RunAt, clockSlack)
		requireNear(t, g.RunAt, res.NextRunAt, storeSlack)
		require.Equal(t, "lease expired", g.Errors[len(g.Errors)-1].Error)
	})

	t.Run("ExpiredLeaseWithoutAttemptsIsDead", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		r := f.insertOne(withJob(func(j *batondriver.JobInsert) { j.MaxAttempts = 1 }))
		f.fetchOne(50 * time.Millisecond)
		res := f.recover(batondriver.JobFetchParams{Max: 1, LeaseTTL: 10 * time.Second})
		require.Empty(t, res.Jobs)
		g := f.get(r.ID)
		require.Equal(t, batondriver.JobStateDead, g.State)
		require.Equal(t, 1, g.Attempt)
		require.Empty(t, g.Lease)
		requireNear(t, time.Now(), g.FinishedAt, clockSlack)
		require.Len(t, g.Errors, 1)
		require.Equal(t, batondriver.AttemptError{Attempt: 1, At: g.Errors[0].At, Error: "lease expired"}, g.Errors[0])
		f.counts(0, 0, 0, 0, 0, 1)
	})

	t.Run("ExtendKeepsLease", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.insertOne(newJob())
		r := f.fetchOne(100 * time.Millisecond)
		ext := f.extend(10*time.Second, lease(r))
		require.Empty(t, ext.Lost)
		requireNear(t, time.Now(), ext.Now, clockSlack)
		requireNear(t, time.Now().Add(10*time.Second), f.get(r.ID).LeaseUntil, clockSlack)
		time.Sleep(150 * time.Millisecond) // past the first expiry
		res := f.fetch(1)
		require.Empty(t, res.Jobs, "an extended lease expired at its old time")
		require.Zero(t, res.Recovered)
		f.complete(r)
	})

	t.Run("ExtendReportsLost", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.insert(newJob(), newJob())
		a := f.fetchOne(10 * time.Second)
		b := f.fetchOne(50 * time.Millisecond)
		ext := f.extend(10*time.Second,
			batondriver.JobLease{ID: a.ID, Lease: "not-the-lease"},
			batondriver.JobLease{ID: unknownID, Lease: a.Lease},
			lease(a),
		)
		require.ElementsMatch(t, []string{a.ID, unknownID}, ext.Lost)

		time.Sleep(100 * time.Millisecond) // b expired, not yet taken back
		require.Equal(t, []string{b.ID}, f.extend(10*time.Second, lease(b)).Lost, "an expired lease was extended")
		b2 := f.fetchOne(10 * time.Second) // takes b back and leases it again
		require.Equal(t, b.ID, b2.ID)
		require.Equal(t, []string{b.ID}, f.extend(10*time.Second, lease(b), lease(b2)).Lost)

		f.complete(a)
		require.Equal(t, []string{a.ID}, f.extend(10*time.Second, lease(a)).Lost, "a finished job's lease was extended")
	})

	t.Run("FinishCompleted", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.insertOne(newJob())
		r := f.fetchOne(10 * time.Second)
		require.Empty(t, f.finish(time.Hour, outcome(r, batondriver.JobOutcomeCompleted, "not recorded", time.Time{})))
		g := f.get(r.ID)
		require.Equal(t, batondriver.JobStateCompleted, g.State)
		require.Equal(t, 1, g.Attempt)
		require.Empty(t, g.Errors)
		require.Empty(t, g.Lease)
		requireNear(t, time.Now(), g.FinishedAt, clockSlack)
		f.counts(0, 0, 0, 1, 0, 0)
		require.Equal(t, []string{r.ID}, f.finish(time.Hour, outcome(r, batondriver.JobOutcomeCompleted, "", time.Time{})), "a second outcome was recorded")
		require.Empty(t, f.fetch(10).Jobs)
	})

	t.Run("FinishRetry", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.insertOne(newJob())
		r := f.fetchOne(10 * time.Second)
		at := time.Now().Add(time.Hour)
		require.Empty(t, f.finish(0, outcome(r, batondriver.JobOutcomeRetry, "boom", at)))
		g := f.get(r.ID)
		require.Equal(t, batondriver.JobStateScheduled, g.State)
		require.Equal(t, 1, g.Attempt)
		require.Empty(t, g.Lease)
		require.True(t, g.FinishedAt.IsZero())
		requireNear(t, at, g.RunAt, storeSlack)
		require.Len(t, g.Errors, 1)
		require.Equal(t, 1, g.Errors[0].Attempt)
		require.Equal(t, "boom", g.Errors[0].Error)
		requireNear(t, time.Now(), g.Errors[0].At, clockSlack)
		res := f.fetch(10)
		require.Empty(t, res.Jobs)
		requireNear(t, at, res.NextRunAt, storeSlack)
	})

	t.Run("FinishDelayOnBackendClock", func(t *testing.T) {
		// A retry's Delay counts from the backend's clock as it records
		// the outcome: RunAt is the recorded error's time plus the delay.
		f := newJobFixture(t, newDriver)
		f.insertOne(newJob())
		r := f.fetchOne(10 * time.Second)
		fin := outcome(r, batondriver.JobOutcomeRetry, "boom", time.Time{})
		fin.Delay = time.Hour
		require.Empty(t, f.finish(0, fin))
		g := f.get(r.ID)
		require.Equal(t, batondriver.JobStateScheduled, g.State)
		require.Len(t, g.Errors, 1)
		require.Equal(t, time.Hour, g.RunAt.Sub(g.Errors[0].At), "RunAt %v, error at %v", g.RunAt, g.Errors[0].At)

		// A snooze with a delay is no give-back; a delay with a RunAt, a
		// negative one, and a give-back with a delay are refused.
		f.insertOne(newJob())
		r = f.fetchOne(10 * time.Second)
		for _, bad := range []func(f *batondriver.JobFinish){
			func(f *batondriver.JobFinish) { f.Delay = -time.Second },
			func(f *batondriver.JobFinish) { f.Delay, f.RunAt = time.Second, time.Now().Add(time.Hour) },
			func(f *batondriver.JobFinish) { f.Delay, f.GiveBack = time.Second, true },
		} {
			fin := outcome(r, batondriver.JobOutcomeSnooze, "", time.Time{})
			bad(fin)
			_, err := f.d.JobFinish(f.ctx, &batondriver.JobFinishParams{Queue: f.queue, Finished: []*batondriver.JobFinish{fin}})
			require.ErrorIs(t, err, batondriver.ErrBadParams)
		}
		fin = outcome(r, batondriver.JobOutcomeSnooze, "", time.Time{})
		fin.Delay = time.Hour
		require.Empty(t, f.finish(0, fin))
		g = f.get(r.ID)
		require.Equal(t, batondriver.JobStateScheduled, g.State)
		require.Zero(t, g.Attempt)
	})

	t.Run("FinishRetryNowThenDead", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		r := f.insertOne(newJob()) // 3 attempts
		for attempt := 1; attempt <= 3; attempt++ {
			got := f.fetchOne(10 * time.Second)
			require.Equal(t, r.ID, got.ID)
			require.Equal(t, attempt, got.Attempt)
			require.Len(t, got.Errors, attempt-1)
			runAt := time.Now().Add(-clockSlack) // due: available again at once
			if attempt == 2 {
				runAt = time.Time{}
			}
			require.Empty(t, f.finish(0, outcome(got, batondriver.JobOutcomeRetry, fmt.Sprintf("e%d", attempt), runAt)))
		}
		g := f.get(r.ID)
		require.Equal(t, batondriver.JobStateDead, g.State, "a retry with no attempts left must be dead")
		requireNear(t, time.Now(), g.FinishedAt, clockSlack)
		require.Len(t, g.Errors, 3)
		for i, e := range g.Errors {
			require.Equal(t, i+1, e.Attempt)
			require.Equal(t, fmt.Sprintf("e%d", i+1), e.Error)
		}
		require.Empty(t, f.fetch(10).Jobs)
	})

	t.Run("QueuedAgainNowRunsAtNow", func(t *testing.T) {
		// A job that an outcome queues again with a run_at not after now
		// (retried, snoozed or run again) is admitted with run_at now, as
		// an insert is: not its earlier run_at.
		f := newJobFixture(t, newDriver)
		for _, o := range []batondriver.JobOutcome{batondriver.JobOutcomeRetry, batondriver.JobOutcomeSnooze, batondriver.JobOutcomeAgain} {
			r := f.insertOne(newJob())
			time.Sleep(10 * time.Millisecond) // the attempt starts after run_at
			got := f.fetchOne(10 * time.Second)
			require.Equal(t, r.ID, got.ID)
			require.True(t, got.AttemptedAt.After(r.RunAt), "%s: attempted %v, run_at %v", o, got.AttemptedAt, r.RunAt)
			f.done(got, o, time.Time{})
			g := f.get(r.ID)
			require.Equal(t, available, g.State, "%s", o)
			require.False(t, g.RunAt.Before(got.AttemptedAt), "%s: run_at %v, before the attempt at %v", o, g.RunAt, got.AttemptedAt)
			f.complete(f.fetchOne(10 * time.Second))
		}
	})

	// A completion stores its output, read back by JobGet and JobList;
	// a run again (Again) keeps it until a later completion brings
	// another; no other outcome takes one, and none over MaxOutputLen.
	t.Run("Output", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		withOutput := func(row *batondriver.JobRow, o batondriver.JobOutcome, out string) *batondriver.JobFinish {
			fin := outcome(row, o, "", time.Time{})
			fin.Output = []byte(out)
			return fin
		}
		rows := f.insert(newJob(), newJob(), newJob(), newJob())
		got := f.fetch(4).Jobs
		require.Len(t, got, 4)
		byID := map[string]*batondriver.JobRow{}
		for _, r := range got {
			require.Nil(t, r.Output, "a fetch's rows carry no output")
			byID[r.ID] = r
		}
		a, b, c, d := byID[rows[0].ID], byID[rows[1].ID], byID[rows[2].ID], byID[rows[3].ID]

		for name, fin := range map[string]*batondriver.JobFinish{
			"retry":    withOutput(a, batondriver.JobOutcomeRetry, `{"n":0}`),
			"snooze":   withOutput(a, batondriver.JobOutcomeSnooze, `{"n":0}`),
			"cancel":   withOutput(a, batondriver.JobOutcomeCancel, `{"n":0}`),
			"dead":     withOutput(a, batondriver.JobOutcomeDead, `{"n":0}`),
			"too long": withOutput(a, batondriver.JobOutcomeCompleted, `"`+strings.Repeat("x", batondriver.MaxOutputLen-1)+`"`),
		} {
			_, err := f.d.JobFinish(f.ctx, &batondriver.JobFinishParams{Queue: f.queue, Finished: []*batondriver.JobFinish{fin}, Retention: time.Hour})
			require.ErrorIs(t, err, batondriver.ErrBadParams, name)
		}
		require.Equal(t, running, f.get(a.ID).State, "a refused call records nothing")

		long := `"` + strings.Repeat("x", batondriver.MaxOutputLen-2) + `"`
		require.Empty(t, f.finish(time.Hour,
			withOutput(a, batondriver.JobOutcomeCompleted, `{"n":1}`),
			withOutput(b, batondriver.JobOutcomeAgain, `{"n":2}`),
			withOutput(c, batondriver.JobOutcomeCompleted, long),
			outcome(d, batondriver.JobOutcomeCompleted, "", time.Time{})))
		require.JSONEq(t, `{"n":1}`, string(f.get(a.ID).Output))
		require.Equal(t, long, string(f.get(c.ID).Output), "MaxOutputLen bytes")
		require.Nil(t, f.get(d.ID).Output, "no output recorded")
		rb := f.get(b.ID)
		require.Equal(t, available, rb.State)
		require.JSONEq(t, `{"n":2}`, string(rb.Output), "an Again's output, kept while it waits to run again")
		outs := map[string]string{}
		for _, r := range f.list(completed, 0, 0).Jobs {
			outs[r.ID] = string(r.Output)
		}
		require.Equal(t, map[string]string{a.ID: `{"n":1}`, c.ID: long, d.ID: ""}, outs, "JobList reads the outputs")
		res := f.list(available, 0, 0)
		require.Len(t, res.Jobs, 1)
		require.JSONEq(t, `{"n":2}`, string(res.Jobs[0].Output))

		// b's next run completes with none: its output stays; the one
		// after brings another.
		rb = f.fetchOne(time.Minute)
		require.Equal(t, b.ID, rb.ID)
		f.complete(rb)
		require.JSONEq(t, `{"n":2}`, string(f.get(b.ID).Output))
		e := f.insertOne(newJob())
		re := f.fetchOne(time.Minute)
		require.Equal(t, e.ID, re.ID)
		require.Empty(t, f.finish(time.Hour, withOutput(re, batondriver.JobOutcomeAgain, `"first"`)))
		re = f.fetchOne(time.Minute)
		require.Empty(t, f.finish(time.Hour, withOutput(re, batondriver.JobOutcomeCompleted, `"second"`)))
		require.Equal(t, `"second"`, string(f.get(e.ID).Output))

		// An Again of a job whose cancel was requested ends it cancelled,
		// its output not stored.
		g := f.insertOne(newJob())
		rg := f.fetchOne(time.Minute)
		require.Equal(t, g.ID, rg.ID)
		_, err := f.cancel(g.ID)
		require.NoError(t, err)
		require.Empty(t, f.finish(time.Hour, withOutput(rg, batondriver.JobOutcomeAgain, `"lost"`)))
		rg = f.get(g.ID)
		require.Equal(t, cancelled, rg.State)
		require.Nil(t, rg.Output)
		require.NotContains(t, rg.Errors[len(rg.Errors)-1].Error, "lost", "the output is not the cancel's error")
	})

	t.Run("RetryWithoutAttemptsIsDead", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.insertOne(withJob(func(j *batondriver.JobInsert) { j.MaxAttempts = 1 }))
		r := f.fetchOne(10 * time.Second)
		require.Empty(t, f.finish(0, outcome(r, batondriver.JobOutcomeRetry, "boom", time.Now().Add(time.Hour))))
		g := f.get(r.ID)
		require.Equal(t, batondriver.JobStateDead, g.State)
		require.Equal(t, "boom", g.Errors[0].Error)
		f.counts(0, 0, 0, 0, 0, 1)
	})

	t.Run("Snooze", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		one := func(j *batondriver.JobInsert) { j.MaxAttempts = 1 }
		later := f.insertOne(withJob(one))
		r := f.fetchOne(10 * time.Second)
		at := time.Now().Add(time.Hour)
		require.Empty(t, f.finish(0, outcome(r, batondriver.JobOutcomeSnooze, "not recorded", at)))
		g := f.get(later.ID)
		require.Equal(t, batondriver.JobStateScheduled, g.State)
		require.Zero(t, g.Attempt, "a snooze must give the attempt back")
		require.Empty(t, g.Errors)
		requireNear(t, at, g.RunAt, storeSlack)

		now := f.insertOne(withJob(one))
		r = f.fetchOne(10 * time.Second)
		require.Equal(t, now.ID, r.ID)
		require.Empty(t, f.finish(0, outcome(r, batondriver.JobOutcomeSnooze, "", time.Now().Add(-clockSlack))))
		require.Equal(t, batondriver.JobStateAvailable, f.get(now.ID).State)
		r = f.fetchOne(10 * time.Second)
		require.Equal(t, now.ID, r.ID)
		require.Equal(t, 1, r.Attempt, "the snoozed attempt was counted")
	})

	t.Run("Cancel", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.insertOne(newJob())
		r := f.fetchOne(10 * time.Second)
		require.Empty(t, f.finish(0, outcome(r, batondriver.JobOutcomeCancel, "no more", time.Now().Add(time.Hour))))
		g := f.get(r.ID)
		require.Equal(t, batondriver.JobStateCancelled, g.State)
		require.Equal(t, 1, g.Attempt)
		require.Empty(t, g.Lease)
		requireNear(t, time.Now(), g.FinishedAt, clockSlack)
		require.Len(t, g.Errors, 1)
		require.Equal(t, "no more", g.Errors[0].Error)
		require.Empty(t, f.fetch(10).Jobs)
		f.counts(0, 0, 0, 0, 1, 0)
	})

	t.Run("Dead", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.insertOne(newJob())
		r := f.fetchOne(10 * time.Second)
		require.Empty(t, f.finish(0, outcome(r, batondriver.JobOutcomeDead, "unknown kind", time.Time{})))
		g := f.get(r.ID)
		require.Equal(t, batondriver.JobStateDead, g.State, "dead with attempts left")
		requireNear(t, time.Now(), g.FinishedAt, clockSlack)
		require.Equal(t, "unknown kind", g.Errors[0].Error)
		require.Empty(t, f.fetch(10).Jobs)
		f.counts(0, 0, 0, 0, 0, 1)
	})

	t.Run("FinishFetch", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.insert(newJob(), newJob(), newJob(), keyJob(key("k"), 1), keyJob(key("k"), 1))
		first := f.fetch(4).Jobs
		require.Len(t, first, 4, "three plain jobs and the key's holder; its twin is parked")
		finishFetch := func(max int, fs ...*batondriver.JobFinish) *batondriver.JobFinishResult {
			t.Helper()
			res, err := f.d.JobFinish(f.ctx, &batondriver.JobFinishParams{Queue: f.queue, Finished: fs,
				Retention: time.Hour, Fetch: &batondriver.JobFinishFetch{Max: max, LeaseTTL: time.Minute}})
			require.NoError(t, err)
			return res
		}
		// Finishing the key's holder promotes its twin, which the same call
		// leases to the caller, with the next fence.
		res := finishFetch(5, outcome(first[3], batondriver.JobOutcomeCompleted, "", time.Time{}))
		require.Empty(t, res.Stale)
		require.Len(t, res.Jobs, 1)
		twin := res.Jobs[0]
		require.Equal(t, batondriver.JobStateRunning, twin.State)
		require.Equal(t, 1, twin.Attempt)
		require.NotEmpty(t, twin.Lease)
		require.Greater(t, twin.Fence, first[3].Fence)
		requireNear(t, time.Now().Add(time.Minute), twin.LeaseUntil, clockSlack)
		require.Equal(t, batondriver.JobStateRunning, f.get(twin.ID).State)
		// A stale outcome is reported and still lets the call lease.
		f.insert(newJob(), newJob())
		res = finishFetch(1, outcome(first[3], batondriver.JobOutcomeCompleted, "", time.Time{}),
			outcome(first[0], batondriver.JobOutcomeCompleted, "", time.Time{}))
		require.Equal(t, []string{first[3].ID}, res.Stale)
		require.Len(t, res.Jobs, 1, "Max bounds the jobs leased")
		// Nothing from a paused queue.
		f.pause(false)
		res = finishFetch(5, outcome(first[1], batondriver.JobOutcomeCompleted, "", time.Time{}))
		require.Empty(t, res.Jobs)
		f.pause(true)
		res = finishFetch(5, outcome(first[2], batondriver.JobOutcomeCompleted, "", time.Time{}))
		require.Len(t, res.Jobs, 1)
		// With no outcomes it is a fetch.
		f.insert(newJob())
		res = finishFetch(5)
		require.Len(t, res.Jobs, 1, "a finish of no outcomes leases as a fetch")
		require.Equal(t, batondriver.JobStateRunning, f.get(res.Jobs[0].ID).State)
		_, err := f.d.JobFinish(f.ctx, &batondriver.JobFinishParams{Queue: f.queue,
			Fetch: &batondriver.JobFinishFetch{Max: 0, LeaseTTL: time.Minute}})
		require.ErrorIs(t, err, batondriver.ErrBadParams)
	})

	t.Run("FinishBatch", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.insert(newJob(), newJob(), newJob(), newJob())
		rs := f.fetch(4).Jobs
		require.Len(t, rs, 4)
		wrong := outcome(rs[3], batondriver.JobOutcomeCompleted, "", time.Time{})
		wrong.Lease = "not-the-lease"
		stale := f.finish(time.Hour,
			outcome(rs[0], batondriver.JobOutcomeCompleted, "", time.Time{}),
			outcome(rs[1], batondriver.JobOutcomeRetry, "boom", time.Now().Add(time.Hour)),
			wrong,
			outcome(rs[2], batondriver.JobOutcomeCancel, "stop", time.Time{}),
		)
		require.Equal(t, []string{rs[3].ID}, stale)
		require.Equal(t, batondriver.JobStateCompleted, f.get(rs[0].ID).State)
		require.Equal(t, batondriver.JobStateScheduled, f.get(rs[1].ID).State)
		require.Equal(t, batondriver.JobStateCancelled, f.get(rs[2].ID).State)
		require.Equal(t, batondriver.JobStateRunning, f.get(rs[3].ID).State)
		f.counts(1, 0, 1, 1, 1, 0)
	})

	t.Run("StaleFinishIgnored", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.insertOne(newJob())
		r := f.fetchOne(50 * time.Millisecond)
		wrong := outcome(r, batondriver.JobOutcomeCompleted, "", time.Time{})
		wrong.Lease = "not-the-lease"
		require.Equal(t, []string{r.ID}, f.finish(time.Hour, wrong))
		require.Equal(t, batondriver.JobStateRunning, f.get(r.ID).State)

		time.Sleep(100 * time.Millisecond) // expired, not yet taken back
		require.Equal(t, []string{r.ID}, f.finish(time.Hour, outcome(r, batondriver.JobOutcomeCompleted, "", time.Time{})),
			"an outcome with an expired lease was recorded")
		g := f.get(r.ID)
		require.NotEqual(t, batondriver.JobStateCompleted, g.State)
		require.Equal(t, 1, g.Attempt)

		r2 := f.fetchOne(10 * time.Second) // takes it back and leases it again
		require.Equal(t, r.ID, r2.ID)
		require.Equal(t, 2, r2.Attempt)
		for _, o := range []batondriver.JobOutcome{batondriver.JobOutcomeCompleted, batondriver.JobOutcomeRetry, batondriver.JobOutcomeSnooze, batondriver.JobOutcomeCancel, batondriver.JobOutcomeDead} {
			require.Equal(t, []string{r.ID}, f.finish(time.Hour, outcome(r, o, "late", time.Time{})), "a late %s was recorded", o)
		}
		g = f.get(r.ID)
		require.Equal(t, batondriver.JobStateRunning, g.State)
		require.Equal(t, 2, g.Attempt)
		require.Equal(t, r2.Lease, g.Lease)
		require.Len(t, g.Errors, 1, "only the expiry's error")
		f.complete(r2)
	})

	t.Run("RetentionZeroDeletes", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.insertOne(newJob())
		r := f.fetchOne(10 * time.Second)
		require.Empty(t, f.finish(0, outcome(r, batondriver.JobOutcomeCompleted, "", time.Time{})))
		f.requireGone(r.ID)
		f.counts(0, 0, 0, 0, 0, 0)
		require.Zero(t, f.list(batondriver.JobStateCompleted, 0, 0).Total)
	})

	t.Run("RetentionSweptByFetch", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		const retention = 300 * time.Millisecond
		f.insertOne(newJob())
		r := f.fetchOne(10 * time.Second)
		start := time.Now()
		require.Empty(t, f.finish(retention, outcome(r, batondriver.JobOutcomeCompleted, "", time.Time{})))
		g := f.get(r.ID)
		if time.Since(start) < retention-20*time.Millisecond {
			require.Equal(t, batondriver.JobStateCompleted, g.State)
			require.Equal(t, 1, f.stats().Counts[batondriver.JobStateCompleted])
		}
		f.eventually("completed job removed", func() bool {
			f.fetch(1)
			_, err := f.d.JobGet(f.ctx, &batondriver.JobGetParams{Queue: f.queue, ID: r.ID})
			if err == nil {
				return false
			}
			require.ErrorIs(t, err, batondriver.ErrJobNotFound)
			return true
		})
		require.GreaterOrEqual(t, time.Since(start), retention-20*time.Millisecond, "removed before its retention")
		f.counts(0, 0, 0, 0, 0, 0)
	})

	t.Run("MaxErrorsKept", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		const attempts = batondriver.MaxErrors + 2
		r := f.insertOne(withJob(func(j *batondriver.JobInsert) { j.MaxAttempts = attempts + 1 }))
		for i := 1; i <= attempts; i++ {
			got := f.fetchOne(10 * time.Second)
			require.Empty(t, f.finish(0, outcome(got, batondriver.JobOutcomeRetry, fmt.Sprintf("e%d", i), time.Time{})))
		}
		g := f.get(r.ID)
		require.Len(t, g.Errors, batondriver.MaxErrors)
		for i, e := range g.Errors {
			n := attempts - batondriver.MaxErrors + 1 + i // the newest, oldest first
			require.Equal(t, n, e.Attempt)
			require.Equal(t, fmt.Sprintf("e%d", n), e.Error)
		}
	})

	t.Run("RowsAreCopies", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		in := withJob(func(j *batondriver.JobInsert) {
			j.Args, j.Tags, j.Metadata = []byte(`{"a":1}`), []string{"t"}, []byte(`{"m":1}`)
		})
		r := f.insertOne(in)
		scribble := func(row *batondriver.JobRow) {
			row.Args[2], row.Tags[0], row.Metadata[2] = 'X', "X", 'X'
			row.State, row.Attempt, row.Priority = batondriver.JobStateDead, 7, 9
			if len(row.Errors) > 0 {
				row.Errors[0].Error = "X"
			}
		}
		check := func() {
			t.Helper()
			g := f.get(r.ID)
			require.Equal(t, `{"a":1}`, string(g.Args))
			require.Equal(t, []string{"t"}, g.Tags)
			require.Equal(t, `{"m":1}`, string(g.Metadata))
			require.NotEqual(t, batondriver.JobStateDead, g.State)
			require.Equal(t, 1, g.Priority)
			for _, e := range g.Errors {
				require.Equal(t, "boom", e.Error)
			}
		}
		in.Args[2], in.Tags[0], in.Metadata[2] = 'X', "X", 'X'
		check()
		scribble(r)
		check()
		scribble(f.get(r.ID))
		check()
		got := f.fetchOne(10 * time.Second)
		require.Empty(t, f.finish(0, outcome(got, batondriver.JobOutcomeRetry, "boom", time.Time{})))
		scribble(f.get(r.ID))
		check()
		got = f.fetchOne(10 * time.Second)
		scribble(got)
		check()
		list := f.list(batondriver.JobStateRunning, 0, 0)
		scribble(list.Jobs[0])
		check()
	})

	t.Run("GetNotFound", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.requireGone(unknownID)
		r := f.insertOne(newJob())
		other := *f
		other.queue = uniqueQueue()
		other.requireGone(r.ID) // a job belongs to its queue
		_, err := other.retry(r.ID)
		require.ErrorIs(t, err, batondriver.ErrJobNotFound)
		require.ErrorIs(t, other.del(r.ID), batondriver.ErrJobNotFound)
		_, err = f.retry(unknownID)
		require.ErrorIs(t, err, batondriver.ErrJobNotFound)
		require.ErrorIs(t, f.del(unknownID), batondriver.ErrJobNotFound)
		f.get(r.ID)
	})

	t.Run("ListStates", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		pause := func() { time.Sleep(5 * time.Millisecond) } // distinct times at millisecond precision
		// running, by AttemptedAt
		f.insert(newJob(), newJob())
		r1 := f.fetchOne(10 * time.Second)
		pause()
		r2 := f.fetchOne(10 * time.Second)
		// completed, cancelled and dead, by FinishedAt
		f.insert(newJob(), newJob(), newJob(), newJob())
		ts := f.fetch(4).Jobs
		require.Len(t, ts, 4)
		f.complete(ts[1])
		pause()
		f.complete(ts[0])
		require.Empty(t, f.finish(0,
			outcome(ts[2], batondriver.JobOutcomeCancel, "c", time.Time{}),
			outcome(ts[3], batondriver.JobOutcomeDead, "d", time.Time{})))
		// scheduled, by RunAt
		now := time.Now()
		ss := f.insert(
			withJob(func(j *batondriver.JobInsert) { j.RunAt = now.Add(3 * time.Hour) }),
			withJob(func(j *batondriver.JobInsert) { j.RunAt = now.Add(time.Hour) }),
			withJob(func(j *batondriver.JobInsert) { j.RunAt = now.Add(2 * time.Hour) }),
		)
		// available, in fetch order: by priority, then arrival
		a1 := f.insertOne(withJob(func(j *batondriver.JobInsert) { j.Priority = 5 }))
		pause()
		a2 := f.insertOne(withJob(func(j *batondriver.JobInsert) { j.Priority = 0 }))
		pause()
		a3 := f.insertOne(withJob(func(j *batondriver.JobInsert) { j.Priority = 5 }))

		for state, want := range map[batondriver.JobState][]string{
			batondriver.JobStateScheduled: {ss[1].ID, ss[2].ID, ss[0].ID},
			batondriver.JobStateAvailable: {a2.ID, a1.ID, a3.ID},
			batondriver.JobStateRunning:   {r1.ID, r2.ID},
			batondriver.JobStateCompleted: {ts[1].ID, ts[0].ID},
			batondriver.JobStateCancelled: {ts[2].ID},
			batondriver.JobStateDead:      {ts[3].ID},
		} {
			res := f.list(state, 0, 0)
			require.Equal(t, want, ids(res.Jobs), "%s jobs, oldest first", state)
			require.Equal(t, len(want), res.Total, state)
		}
	})

	t.Run("ListPages", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		all := ids(f.insert(newJob(), newJob(), newJob(), newJob(), newJob()))
		for _, c := range []struct {
			limit, offset int
			want          []string
		}{
			{2, 0, all[:2]}, {2, 2, all[2:4]}, {2, 4, all[4:]}, {2, 5, []string{}}, {3, 100, []string{}}, {0, 1, all[1:]},
		} {
			res := f.list(batondriver.JobStateAvailable, c.limit, c.offset)
			require.Equal(t, c.want, ids(res.Jobs), "limit %d offset %d", c.limit, c.offset)
			require.Equal(t, 5, res.Total)
		}
		empty := f.list(batondriver.JobStateDead, 0, 0)
		require.Empty(t, empty.Jobs)
		require.Zero(t, empty.Total)
	})

	t.Run("ListDefaultLimit", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		jobs := make([]*batondriver.JobInsert, 101)
		for i := range jobs {
			jobs[i] = newJob()
		}
		f.insert(jobs...)
		res := f.list(batondriver.JobStateAvailable, 0, 0)
		require.Len(t, res.Jobs, 100, "Limit 0 means 100")
		require.Equal(t, 101, res.Total)
		require.Len(t, f.list(batondriver.JobStateAvailable, 1000, 0).Jobs, 101)
	})

	t.Run("RetryDead", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.insertOne(withJob(func(j *batondriver.JobInsert) { j.MaxAttempts = 1 }))
		r := f.fetchOne(10 * time.Second)
		require.Empty(t, f.finish(0, outcome(r, batondriver.JobOutcomeRetry, "boom", time.Time{})))
		require.Equal(t, batondriver.JobStateDead, f.get(r.ID).State)
		g, err := f.retry(r.ID)
		require.NoError(t, err)
		require.Equal(t, r.ID, g.ID)
		require.Equal(t, batondriver.JobStateAvailable, g.State)
		require.Zero(t, g.Attempt, "attempts must be reset")
		require.True(t, g.FinishedAt.IsZero())
		requireNear(t, time.Now(), g.RunAt, clockSlack)
		require.Len(t, g.Errors, 1, "errors must be kept")
		require.Equal(t, batondriver.JobStateAvailable, f.get(r.ID).State)
		got := f.fetchOne(10 * time.Second)
		require.Equal(t, r.ID, got.ID)
		require.Equal(t, 1, got.Attempt)
	})

	t.Run("RetryCancelled", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.insertOne(newJob())
		r := f.fetchOne(10 * time.Second)
		require.Empty(t, f.finish(0, outcome(r, batondriver.JobOutcomeCancel, "stop", time.Time{})))
		g, err := f.retry(r.ID)
		require.NoError(t, err)
		require.Equal(t, batondriver.JobStateAvailable, g.State)
		require.Zero(t, g.Attempt)
		require.Equal(t, "stop", g.Errors[0].Error)
		f.counts(0, 1, 0, 0, 0, 0)
		require.Equal(t, r.ID, f.fetchOne(10*time.Second).ID)
	})

	t.Run("RetryScheduled", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		r := f.insertOne(withJob(func(j *batondriver.JobInsert) { j.RunAt = time.Now().Add(time.Hour) }))
		g, err := f.retry(r.ID)
		require.NoError(t, err)
		require.Equal(t, batondriver.JobStateAvailable, g.State)
		requireNear(t, time.Now(), g.RunAt, clockSlack)
		got := f.fetchOne(10 * time.Second)
		require.Equal(t, r.ID, got.ID)
	})

	t.Run("RetryMakesOldLeaseStale", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.insertOne(newJob())
		r := f.fetchOne(50 * time.Millisecond)
		f.recover(batondriver.JobFetchParams{Max: 1, LeaseTTL: 10 * time.Second, RecoverDelay: time.Hour})
		g, err := f.retry(r.ID)
		require.NoError(t, err)
		require.Zero(t, g.Attempt)
		r2 := f.fetchOne(10 * time.Second)
		require.Equal(t, 1, r2.Attempt)
		require.Equal(t, []string{r.ID}, f.finish(0, outcome(r, batondriver.JobOutcomeCompleted, "", time.Time{})))
		require.Equal(t, []string{r.ID}, f.extend(time.Second, lease(r)).Lost)
		f.complete(r2)
	})

	// An available job keeps its place; only its attempts are reset.
	t.Run("RetryAvailable", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.insertOne(newJob())
		r := f.fetchOne(50 * time.Millisecond)
		f.recover(batondriver.JobFetchParams{Max: 0, LeaseTTL: 10 * time.Second})
		require.Equal(t, batondriver.JobStateAvailable, f.get(r.ID).State)
		require.Equal(t, 1, f.get(r.ID).Attempt, "the expired attempt counts")
		x := f.insertOne(newJob())
		g, err := f.retry(r.ID)
		require.NoError(t, err)
		require.Equal(t, batondriver.JobStateAvailable, g.State)
		require.Zero(t, g.Attempt)
		require.Zero(t, f.get(r.ID).Attempt)
		rs := f.fetch(10).Jobs
		require.Equal(t, []string{r.ID, x.ID}, ids(rs), "the retried job kept its place")
		require.Equal(t, 1, rs[0].Attempt)
	})

	t.Run("RetryRejected", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.insert(newJob(), newJob())
		running := f.fetchOne(10 * time.Second)
		_, err := f.retry(running.ID)
		require.ErrorIs(t, err, batondriver.ErrBadParams, "a running job was retried")
		g := f.get(running.ID)
		require.Equal(t, batondriver.JobStateRunning, g.State)
		require.Equal(t, running.Lease, g.Lease)

		done := f.fetchOne(10 * time.Second)
		f.complete(done)
		_, err = f.retry(done.ID)
		require.ErrorIs(t, err, batondriver.ErrBadParams, "a completed job was retried")
		require.Equal(t, batondriver.JobStateCompleted, f.get(done.ID).State)
	})

	t.Run("Delete", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.insert(newJob(), newJob())
		running := f.fetchOne(10 * time.Second)
		dead := f.fetchOne(10 * time.Second)
		require.Empty(t, f.finish(0, outcome(dead, batondriver.JobOutcomeDead, "x", time.Time{})))
		avail := f.insertOne(newJob())
		sched := f.insertOne(withJob(func(j *batondriver.JobInsert) { j.RunAt = time.Now().Add(time.Hour) }))
		f.counts(1, 1, 1, 0, 0, 1)

		require.ErrorIs(t, f.del(running.ID), batondriver.ErrBadParams, "a running job was deleted")
		require.Equal(t, batondriver.JobStateRunning, f.get(running.ID).State)
		for _, id := range []string{avail.ID, sched.ID, dead.ID} {
			require.NoError(t, f.del(id))
			f.requireGone(id)
			require.ErrorIs(t, f.del(id), batondriver.ErrJobNotFound)
		}
		res := f.fetch(10)
		require.Empty(t, res.Jobs, "a deleted job was fetched")
		require.True(t, res.NextRunAt.IsZero(), "a deleted job is still scheduled")
		f.counts(0, 0, 1, 0, 0, 0)
		require.Zero(t, f.list(batondriver.JobStateDead, 0, 0).Total)
	})

	t.Run("QueueStats", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		st := f.stats()
		require.False(t, st.Paused)
		require.True(t, st.OldestAvailable.IsZero())
		f.counts(0, 0, 0, 0, 0, 0)

		f.insert(newJob(), newJob(), newJob(), newJob())
		rs := f.fetch(4).Jobs
		require.Len(t, rs, 4)
		require.Empty(t, f.finish(time.Hour,
			outcome(rs[0], batondriver.JobOutcomeCompleted, "", time.Time{}),
			outcome(rs[1], batondriver.JobOutcomeCancel, "c", time.Time{}),
			outcome(rs[2], batondriver.JobOutcomeDead, "d", time.Time{})))
		at := time.Now().Add(time.Hour)
		f.insert(
			withJob(func(j *batondriver.JobInsert) { j.RunAt = at }),
			withJob(func(j *batondriver.JobInsert) { j.RunAt = at }),
		)
		oldest := f.insertOne(withJob(func(j *batondriver.JobInsert) { j.Priority = 9 }))
		time.Sleep(5 * time.Millisecond)
		f.insert(withJob(func(j *batondriver.JobInsert) { j.Priority = 0 }), newJob())
		f.counts(2, 3, 1, 1, 1, 1)
		st = f.stats()
		require.Len(t, st.Counts, len(batondriver.JobStates), "every state is counted")
		requireNear(t, oldest.RunAt, st.OldestAvailable, storeSlack)
	})

	t.Run("QueueList", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		names, err := f.d.QueueList(f.ctx)
		require.NoError(t, err)
		require.NotContains(t, names, f.queue)

		// Pausing and waiting do not make a queue that had a job.
		require.NoError(t, f.d.QueuePause(f.ctx, &batondriver.QueuePauseParams{Queue: f.queue}))
		require.NoError(t, f.d.JobWait(f.ctx, &batondriver.JobWaitParams{Queue: f.queue, Timeout: time.Millisecond}))
		names, err = f.d.QueueList(f.ctx)
		require.NoError(t, err)
		require.NotContains(t, names, f.queue)

		r := f.insertOne(newJob())
		require.NoError(t, f.del(r.ID))
		names, err = f.d.QueueList(f.ctx)
		require.NoError(t, err)
		require.Contains(t, names, f.queue, "a queue that had a job is listed")
		require.True(t, slices.IsSorted(names), "names must be sorted")
	})

	t.Run("Pause", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.insert(newJob(), newJob())
		running := f.fetchOne(10 * time.Second)
		f.pause(false)
		f.pause(false) // twice is once
		res := f.fetch(10)
		require.True(t, res.Paused)
		require.Empty(t, res.Jobs)
		require.True(t, f.stats().Paused)

		// Inserts, outcomes, extensions and admin operations still work.
		r := f.insertOne(newJob())
		require.Equal(t, batondriver.JobStateAvailable, r.State)
		require.Empty(t, f.extend(10*time.Second, lease(running)).Lost)
		f.complete(running)
		require.Equal(t, 2, f.list(batondriver.JobStateAvailable, 0, 0).Total)
		require.NoError(t, f.del(r.ID))
		f.counts(0, 1, 0, 1, 0, 0)

		f.pause(true)
		require.False(t, f.stats().Paused)
		res = f.fetch(10)
		require.False(t, res.Paused)
		require.Len(t, res.Jobs, 1)
	})

	t.Run("PausedFetchAdmitsDueJobs", func(t *testing.T) {
		// A fetch of a paused queue leases nothing but does its upkeep: the
		// due job it admits is available, and leased after the resume.
		f := newJobFixture(t, newDriver)
		r := f.insertOne(withJob(func(j *batondriver.JobInsert) { j.Delay = 50 * time.Millisecond }))
		f.pause(false)
		time.Sleep(100 * time.Millisecond)
		require.Empty(t, f.fetch(10).Jobs)
		f.requireState(available, r.ID)
		f.counts(0, 1, 0, 0, 0, 0)
		f.pause(true)
		require.Equal(t, r.ID, f.fetchOne(10*time.Second).ID)
	})

	t.Run("ResumeWakesOnePerAvailableJob", func(t *testing.T) {
		// Jobs inserted into a paused queue woke fetchers that found
		// nothing to lease; a resume wakes one per available job.
		f := newJobFixture(t, newDriver)
		f.pause(false)
		f.insert(newJob(), withJob(func(j *batondriver.JobInsert) { j.Priority = 7 }))
		f.drainWakes()
		a, b := f.wait(f.ctx, 5*time.Second), f.wait(f.ctx, 5*time.Second)
		time.Sleep(50 * time.Millisecond) // let both wait
		f.pause(true)
		for _, ch := range []<-chan waited{a, b} {
			w := f.waitResult(ch)
			require.NoError(t, w.err)
			require.Less(t, w.took, 2500*time.Millisecond, "two available jobs did not wake two waiters")
		}
	})

	t.Run("WaitWokenByInsert", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		ch := f.wait(f.ctx, 10*time.Second)
		time.Sleep(50 * time.Millisecond) // let it wait; an insert before it waits wakes it too
		f.insertOne(newJob())
		w := f.waitResult(ch)
		require.NoError(t, w.err)
		require.Less(t, w.took, 5*time.Second, "JobWait slept through an insert")
	})

	t.Run("WaitTokenOutlivesInsert", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.insertOne(newJob()) // nobody waits yet: the wake is kept
		w := f.waitResult(f.wait(f.ctx, 10*time.Second))
		require.NoError(t, w.err)
		require.Less(t, w.took, 5*time.Second, "an insert's wake was lost")
	})

	t.Run("WaitWokenForDueJobsLeftAvailable", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		at := time.Now().Add(50 * time.Millisecond)
		job := withJob(func(j *batondriver.JobInsert) { j.RunAt = at })
		f.insert(job, job, job)
		f.eventually("due job fetched", func() bool { return len(f.fetch(1).Jobs) == 1 })
		// The fetch made three jobs available and leased one: the other two
		// must not wait for a fetcher's safety poll.
		for range 2 {
			w := f.waitResult(f.wait(f.ctx, 10*time.Second))
			require.NoError(t, w.err)
			require.Less(t, w.took, 5*time.Second, "a due job left available woke nobody")
		}
	})

	t.Run("WaitWakesOnePerJob", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		const timeout = time.Second
		a, b := f.wait(f.ctx, timeout), f.wait(f.ctx, timeout)
		time.Sleep(50 * time.Millisecond) // let both wait
		f.insertOne(newJob())
		wa, wb := f.waitResult(a), f.waitResult(b)
		require.NoError(t, wa.err)
		require.NoError(t, wb.err)
		first, second := min(wa.took, wb.took), max(wa.took, wb.took)
		require.Less(t, first, timeout/2, "no waiter was woken by the insert")
		require.GreaterOrEqual(t, second, timeout-20*time.Millisecond, "one job woke two waiters")
	})

	t.Run("WaitWakesOneEachForABatch", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		const timeout = 5 * time.Second
		a, b := f.wait(f.ctx, timeout), f.wait(f.ctx, timeout)
		time.Sleep(50 * time.Millisecond)
		f.insert(newJob(), newJob())
		for _, ch := range []<-chan waited{a, b} {
			w := f.waitResult(ch)
			require.NoError(t, w.err)
			require.Less(t, w.took, timeout/2, "two jobs did not wake two waiters")
		}
	})

	// A call wakes one fetcher per job it made available and left
	// available, not per job it made available: a job it leased itself
	// wakes nobody, even while it leaves older jobs available (their tokens
	// were pushed when they became available). Here each call makes two
	// jobs available and leases the more urgent, before an older one.
	t.Run("WaitWokenOnlyForJobsLeftAvailable", func(t *testing.T) {
		t.Run("Fetch", func(t *testing.T) {
			f := newJobFixture(t, newDriver)
			old := f.insertIn(available, withJob(prio(5)))
			due := func(p int) *batondriver.JobInsert {
				return withJob(func(j *batondriver.JobInsert) { j.Priority, j.Delay = p, 20*time.Millisecond })
			}
			urgent, later := f.insertIn(scheduled, due(0)), f.insertIn(scheduled, due(5))
			f.takeWakes()
			time.Sleep(50 * time.Millisecond) // both due, by the backend's clock too
			require.Equal(t, []string{urgent.ID}, ids(f.fetch(1).Jobs), "the fetch leases the urgent job it admits")
			require.Equal(t, 1, f.takeWakes(), "wake tokens for the two jobs a fetch admitted and the one it leased")
			f.requireState(available, old.ID, later.ID)
		})
		t.Run("FinishFetch", func(t *testing.T) {
			f := newJobFixture(t, newDriver)
			k := key("k")
			h1, h2 := f.hold(k, 2, time.Minute, prio(5)), f.hold(k, 2, time.Minute, prio(5))
			urgent := f.insertIn(parked, keyJob(k, 2, prio(0)))
			later := f.insertIn(parked, keyJob(k, 2, prio(5)))
			old := f.insertIn(available, withJob(prio(5)))
			f.takeWakes()
			res, err := f.d.JobFinish(f.ctx, &batondriver.JobFinishParams{Queue: f.queue, Retention: time.Hour,
				Finished: []*batondriver.JobFinish{outcome(h1, batondriver.JobOutcomeCompleted, "", time.Time{}),
					outcome(h2, batondriver.JobOutcomeCompleted, "", time.Time{})},
				Fetch: &batondriver.JobFinishFetch{Max: 1, LeaseTTL: time.Minute}})
			require.NoError(t, err)
			require.Empty(t, res.Stale)
			require.Equal(t, []string{urgent.ID}, ids(res.Jobs), "the finish leases the urgent job it promotes")
			require.Equal(t, 1, f.takeWakes(), "wake tokens for the two jobs a finish promoted and the one it leased")
			f.requireState(available, old.ID, later.ID)
		})
	})

	t.Run("WaitTimeout", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		const timeout = 100 * time.Millisecond
		w := f.waitResult(f.wait(f.ctx, timeout))
		require.NoError(t, w.err, "a timeout is not an error")
		require.GreaterOrEqual(t, w.took, timeout-20*time.Millisecond)
		require.Less(t, w.took, 5*time.Second)
	})

	t.Run("WaitContext", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		ctx, cancel := context.WithCancel(f.ctx)
		ch := f.wait(ctx, 10*time.Second)
		time.Sleep(50 * time.Millisecond)
		cancel()
		w := f.waitResult(ch)
		require.ErrorIs(t, w.err, context.Canceled)
		require.Less(t, w.took, 5*time.Second)

		ctx, cancel = context.WithTimeout(f.ctx, 50*time.Millisecond)
		defer cancel()
		w = f.waitResult(f.wait(ctx, 10*time.Second))
		require.ErrorIs(t, w.err, context.DeadlineExceeded)
		require.Less(t, w.took, 5*time.Second)

		// The cancelled waiters took no wake with them.
		b := f.wait(f.ctx, 10*time.Second)
		time.Sleep(50 * time.Millisecond)
		f.insertOne(newJob())
		w = f.waitResult(b)
		require.NoError(t, w.err)
		require.Less(t, w.took, 5*time.Second)
	})

	t.Run("BadParams", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		bad := func(name string, err error) {
			t.Helper()
			require.ErrorIs(t, err, batondriver.ErrBadParams, name)
		}
		insert := func(q string, j *batondriver.JobInsert) error {
			_, err := f.d.JobInsert(f.ctx, &batondriver.JobInsertParams{Queue: q, Jobs: []*batondriver.JobInsert{j}})
			return err
		}
		bad("insert: empty queue", insert("", newJob()))
		bad("insert: empty kind", insert(f.queue, withJob(func(j *batondriver.JobInsert) { j.Kind = "" })))
		bad("insert: negative priority", insert(f.queue, withJob(func(j *batondriver.JobInsert) { j.Priority = -1 })))
		bad("insert: priority over max", insert(f.queue, withJob(func(j *batondriver.JobInsert) { j.Priority = batondriver.MaxPriority + 1 })))
		bad("insert: no attempts", insert(f.queue, withJob(func(j *batondriver.JobInsert) { j.MaxAttempts = 0 })))
		_, err := f.d.JobInsert(f.ctx, &batondriver.JobInsertParams{Queue: f.queue, Jobs: []*batondriver.JobInsert{
			newJob(), withJob(func(j *batondriver.JobInsert) { j.Kind = "" }),
		}})
		bad("insert: one bad job", err)
		f.counts(0, 0, 0, 0, 0, 0) // a rejected batch inserts nothing

		for name, p := range map[string]batondriver.JobFetchParams{
			"fetch: empty queue":    {Max: 1, LeaseTTL: time.Second},
			"fetch: negative max":   {Queue: f.queue, Max: -1, LeaseTTL: time.Second},
			"fetch: zero lease TTL": {Queue: f.queue, Max: 1},
			"fetch: sub-ms TTL":     {Queue: f.queue, Max: 1, LeaseTTL: time.Microsecond},
			"fetch: negative delay": {Queue: f.queue, Max: 1, LeaseTTL: time.Second, RecoverDelay: -time.Second},
		} {
			_, err := f.d.JobFetch(f.ctx, &p)
			bad(name, err)
		}
		bad("wait: empty queue", f.d.JobWait(f.ctx, &batondriver.JobWaitParams{Timeout: time.Second}))
		bad("wait: zero timeout", f.d.JobWait(f.ctx, &batondriver.JobWaitParams{Queue: f.queue}))

		_, err = f.d.JobExtend(f.ctx, &batondriver.JobExtendParams{Queue: f.queue, Leases: []batondriver.JobLease{{ID: unknownID, Lease: "x"}}})
		bad("extend: zero TTL", err)
		_, err = f.d.JobExtend(f.ctx, &batondriver.JobExtendParams{Leases: []batondriver.JobLease{{ID: unknownID, Lease: "x"}}, TTL: time.Second})
		bad("extend: empty queue", err)

		one := []*batondriver.JobFinish{{JobLease: batondriver.JobLease{ID: unknownID, Lease: "x"}, Outcome: batondriver.JobOutcomeCompleted}}
		_, err = f.d.JobFinish(f.ctx, &batondriver.JobFinishParams{Finished: one})
		bad("finish: empty queue", err)
		_, err = f.d.JobFinish(f.ctx, &batondriver.JobFinishParams{Queue: f.queue, Finished: one, Retention: -time.Second})
		bad("finish: negative retention", err)
		_, err = f.d.JobFinish(f.ctx, &batondriver.JobFinishParams{Queue: f.queue, Finished: []*batondriver.JobFinish{
			{JobLease: batondriver.JobLease{ID: unknownID, Lease: "x"}, Outcome: "maybe"},
		}})
		bad("finish: unknown outcome", err)
		for name, f0 := range map[string]*batondriver.JobFinish{
			"finish: GiveBack of a completed job": {Outcome: batondriver.JobOutcomeCompleted, GiveBack: true},
			"finish: GiveBack with a RunAt":       {Outcome: batondriver.JobOutcomeSnooze, RunAt: time.Now(), GiveBack: true},
		} {
			f0.JobLease = batondriver.JobLease{ID: unknownID, Lease: "x"}
			_, err = f.d.JobFinish(f.ctx, &batondriver.JobFinishParams{Queue: f.queue, Finished: []*batondriver.JobFinish{f0}})
			bad(name, err)
		}

		for name, p := range map[string]batondriver.JobListParams{
			"list: empty queue":     {State: batondriver.JobStateAvailable},
			"list: unknown state":   {Queue: f.queue, State: "sleeping"},
			"list: limit over 1000": {Queue: f.queue, State: batondriver.JobStateAvailable, Limit: 1001},
			"list: negative limit":  {Queue: f.queue, State: batondriver.JobStateAvailable, Limit: -1},
			"list: negative offset": {Queue: f.queue, State: batondriver.JobStateAvailable, Offset: -1},
		} {
			_, err := f.d.JobList(f.ctx, &p)
			bad(name, err)
		}
		_, err = f.d.JobGet(f.ctx, &batondriver.JobGetParams{ID: unknownID})
		bad("get: empty queue", err)
		_, err = f.d.JobRetry(f.ctx, &batondriver.JobGetParams{ID: unknownID})
		bad("retry: empty queue", err)
		bad("delete: empty queue", f.d.JobDelete(f.ctx, &batondriver.JobGetParams{ID: unknownID}))
		_, err = f.d.QueueStats(f.ctx, &batondriver.QueueParams{})
		bad("stats: empty queue", err)
		bad("pause: empty queue", f.d.QueuePause(f.ctx, &batondriver.QueuePauseParams{}))
	})

	// Every call that takes a queue refuses a name that is not 1 to
	// batondriver.MaxQueueLen bytes of A-Z a-z 0-9 _ . : - (see
	// batondriver.CheckQueue) with ErrBadParams, naming the queue, and
	// changes nothing; a name of the longest length and every allowed
	// byte works.
	t.Run("BadQueueName", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		good := uniqueQueue() + "_.:-AZaz09"
		good += strings.Repeat("x", batondriver.MaxQueueLen-len(good))
		f.queue = good
		row := f.insertOne(newJob())
		require.Equal(t, good, f.get(row.ID).Queue)

		bads := []string{"", "a b", "x!", "{q}", "q/1", "ключ", "q\x00", good + "x"}
		for _, q := range bads {
			calls := map[string]func() error{
				"JobInsert": func() error {
					_, err := f.d.JobInsert(f.ctx, &batondriver.JobInsertParams{Queue: q, Jobs: []*batondriver.JobInsert{newJob()}})
					return err
				},
				"JobFetch": func() error {
					_, err := f.d.JobFetch(f.ctx, &batondriver.JobFetchParams{Queue: q, Max: 1, LeaseTTL: time.Second})
					return err
				},
				"JobWait": func() error {
					return f.d.JobWait(f.ctx, &batondriver.JobWaitParams{Queue: q, Timeout: 10 * time.Millisecond})
				},
				"JobExtend": func() error {
					_, err := f.d.JobExtend(f.ctx, &batondriver.JobExtendParams{Queue: q, Leases: []batondriver.JobLease{{ID: unknownID, Lease: "x"}}, TTL: time.Second})
					return err
				},
				"JobFinish": func() error {
					_, err := f.d.JobFinish(f.ctx, &batondriver.JobFinishParams{Queue: q, Finished: []*batondriver.JobFinish{
						{JobLease: batondriver.JobLease{ID: unknownID, Lease: "x"}, Outcome: batondriver.JobOutcomeCompleted},
					}})
					return err
				},
				"JobGet": func() error {
					_, err := f.d.JobGet(f.ctx, &batondriver.JobGetParams{Queue: q, ID: unknownID})
					return err
				},
				"JobList": func() error {
					_, err := f.d.JobList(f.ctx, &batondriver.JobListParams{Queue: q, State: batondriver.JobStateAvailable})
					return err
				},
				"JobRetry": func() error {
					_, err := f.d.JobRetry(f.ctx, &batondriver.JobGetParams{Queue: q, ID: unknownID})
					return err
				},
				"JobDelete": func() error { return f.d.JobDelete(f.ctx, &batondriver.JobGetParams{Queue: q, ID: unknownID}) },
				"JobCancel": func() error {
					_, err := f.d.JobCancel(f.ctx, &batondriver.JobCancelParams{Queue: q, ID: unknownID, Reason: cancelReason})
					return err
				},
				"QueueStats": func() error {
					_, err := f.d.QueueStats(f.ctx, &batondriver.QueueParams{Queue: q})
					return err
				},
				"QueuePause": func() error { return f.d.QueuePause(f.ctx, &batondriver.QueuePauseParams{Queue: q}) },
				"QueueScheduleRegister": func() error {
					return f.d.QueueScheduleRegister(f.ctx, &batondriver.QueueScheduleParams{Queue: q, Name: "s", Kind: "test", TTL: time.Hour})
				},
				"QueueScheduleList": func() error {
					_, err := f.d.QueueScheduleList(f.ctx, &batondriver.QueueParams{Queue: q})
					return err
				},
				"KeySetLimit": func() error {
					_, err := f.d.KeySetLimit(f.ctx, &batondriver.KeySetLimitParams{Queue: q, Key: "k", Limit: 1})
					return err
				},
				"KeyGet": func() error {
					_, err := f.d.KeyGet(f.ctx, &batondriver.KeyParams{Queue: q, Key: "k"})
					return err
				},
				"KeyList": func() error {
					_, err := f.d.KeyList(f.ctx, &batondriver.KeyListParams{Queue: q})
					return err
				},
			}
			for name, call := range calls {
				err := call()
				require.ErrorIs(t, err, batondriver.ErrBadParams, "%s(%q)", name, q)
				require.ErrorContains(t, err, fmt.Sprintf("queue name %q", q), "%s(%q)", name, q)
			}
		}
		queues, err := f.d.QueueList(f.ctx)
		require.NoError(t, err)
		require.Contains(t, queues, good)
		for _, q := range bads {
			require.NotContains(t, queues, q, "a refused name was listed")
		}
	})
}

// exerciseEndedContexts checks that a call whose context has ended returns
// the context's error and changes nothing, as a client over a network
// sends nothing then.
func exerciseEndedContexts(t *testing.T, newDriver func(t *testing.T) batondriver.JobDriver) {
	f := newJobFixture(t, newDriver)
	keyed := withJob(func(j *batondriver.JobInsert) { j.Key, j.Limit = "k", 1 })
	rows := f.insert(newJob(), keyed)
	running := f.fetchOne(time.Minute)
	idle := rows[1]
	if running.ID == idle.ID {
		idle = rows[0]
	}
	ended, cancel := context.WithCancel(f.ctx)
	cancel()
	q := f.queue
	calls := map[string]func() error{
		"JobInsert": func() error {
			_, err := f.d.JobInsert(ended, &batondriver.JobInsertParams{Queue: q, Jobs: []*batondriver.JobInsert{newJob()}})
			return err
		},
		"JobInsert of none": func() error {
			_, err := f.d.JobInsert(ended, &batondriver.JobInsertParams{Queue: q})
			return err
		},
		"JobFinish of none": func() error {
			_, err := f.d.JobFinish(ended, &batondriver.JobFinishParams{Queue: q})
			return err
		},
		"JobFetch": func() error {
			_, err := f.d.JobFetch(ended, &batondriver.JobFetchParams{Queue: q, Max: 10, LeaseTTL: time.Minute})
			return err
		},
		"JobExtend": func() error {
			_, err := f.d.JobExtend(ended, &batondriver.JobExtendParams{Queue: q, Leases: []batondriver.JobLease{lease(running)}, TTL: time.Hour})
			return err
		},
		"JobFinish": func() error {
			_, err := f.d.JobFinish(ended, &batondriver.JobFinishParams{Queue: q, Retention: time.Hour,
				Finished: []*batondriver.JobFinish{outcome(running, batondriver.JobOutcomeCompleted, "", time.Time{})}})
			return err
		},
		"JobRetry": func() error {
			_, err := f.d.JobRetry(ended, &batondriver.JobGetParams{Queue: q, ID: idle.ID})
			return err
		},
		"JobDelete": func() error { return f.d.JobDelete(ended, &batondriver.JobGetParams{Queue: q, ID: idle.ID}) },
		"JobCancel": func() error {
			_, err := f.d.JobCancel(ended, &batondriver.JobCancelParams{Queue: q, ID: idle.ID, Reason: cancelReason})
			return err
		},
		"JobCancel of a running job": func() error {
			_, err := f.d.JobCancel(ended, &batondriver.JobCancelParams{Queue: q, ID: running.ID, Reason: cancelReason})
			return err
		},
		"QueuePause": func() error { return f.d.QueuePause(ended, &batondriver.QueuePauseParams{Queue: q}) },
		"KeySetLimit": func() error {
			_, err := f.d.KeySetLimit(ended, &batondriver.KeySetLimitParams{Queue: q, Key: "k", Limit: 5})
			return err
		},
		"QueueScheduleRegister": func() error {
			return f.d.QueueScheduleRegister(ended, &batondriver.QueueScheduleParams{Queue: q, Name: "s", Kind: "test", TTL: time.Hour})
		},
		"JobGet": func() error {
			_, err := f.d.JobGet(ended, &batondriver.JobGetParams{Queue: q, ID: idle.ID})
			return err
		},
		"JobList": func() error {
			_, err := f.d.JobList(ended, &batondriver.JobListParams{Queue: q, State: batondriver.JobStateAvailable})
			return err
		},
		"QueueStats": func() error {
			_, err := f.d.QueueStats(ended, &batondriver.QueueParams{Queue: q})
			return err
		},
		"QueueList": func() error {
			_, err := f.d.QueueList(ended)
			return err
		},
		"KeyGet": func() error {
			_, err := f.d.KeyGet(ended, &batondriver.KeyParams{Queue: q, Key: "k"})
			return err
		},
		"KeyList": func() error {
			_, err := f.d.KeyList(ended, &batondriver.KeyListParams{Queue: q})
			return err
		},
		"QueueScheduleList": func() error {
			_, err := f.d.QueueScheduleList(ended, &batondriver.QueueParams{Queue: q})
			return err
		},
	}
	for name, call := range calls {
		require.ErrorIs(t, call(), context.Canceled, "%s with an ended context", name)
	}

	stats, err := f.d.QueueStats(f.ctx, &batondriver.QueueParams{Queue: q})
	require.NoError(t, err)
	require.False(t, stats.Paused)
	require.Equal(t, map[batondriver.JobState]int{batondriver.JobStateAvailable: 1, batondriver.JobStateRunning: 1},
		nonZero(stats.Counts), "no job inserted, leased, finished or deleted")
	r := f.get(running.ID)
	require.Equal(t, batondriver.JobStateRunning, r.State)
	require.Equal(t, running.LeaseUntil, r.LeaseUntil, "lease not extended")
	require.True(t, r.CancelRequestedAt.IsZero(), "no cancel requested")
	require.Equal(t, idle.Attempt, f.get(idle.ID).Attempt)
	info, err := f.d.KeyGet(f.ctx, &batondriver.KeyParams{Queue: q, Key: "k"})
	require.NoError(t, err)
	require.False(t, info.Override, "no limit set")
	scheds, err := f.d.QueueScheduleList(f.ctx, &batondriver.QueueParams{Queue: q})
	require.NoError(t, err)
	require.Empty(t, scheds.Schedules, "no schedule registered")
}

// exerciseEndedContextBadParams checks that a job call with invalid
// parameters returns ErrBadParams whether or not its context has ended, as
// exerciseLockEndedContextBadParams does for locks: each call below has one
// invalid parameter, most of them checked after the queue's name.
func exerciseEndedContextBadParams(t *testing.T, newDriver func(t *testing.T) batondriver.JobDriver) {
	f := newJobFixture(t, newDriver)
	q := f.queue
	bogus := batondriver.JobLease{ID: unknownID, Lease: "x"}
	calls := map[string]func(ctx context.Context) error{
		"JobInsert: a priority out of range": func(ctx context.Context) error {
			_, err := f.d.JobInsert(ctx, &batondriver.JobInsertParams{Queue: q, Jobs: []*batondriver.JobInsert{withJob(prio(batondriver.MaxPriority + 1))}})
			return err
		},
		"JobInsert: a bad queue name": func(ctx context.Context) error {
			_, err := f.d.JobInsert(ctx, &batondriver.JobInsertParams{Queue: "a queue", Jobs: []*batondriver.JobInsert{newJob()}})
			return err
		},
		"JobInsert of none: Once without a Name": func(ctx context.Context) error {
			_, err := f.d.JobInsert(ctx, &batondriver.JobInsertParams{Queue: q, Once: &batondriver.JobInsertOnce{Tick: time.Now()}})
			return err
		},
		"JobFetch: no LeaseTTL": func(ctx context.Context) error {
			_, err := f.d.JobFetch(ctx, &batondriver.JobFetchParams{Queue: q, Max: 1})
			return err
		},
		"JobWait: no Timeout": func(ctx context.Context) error {
			return f.d.JobWait(ctx, &batondriver.JobWaitParams{Queue: q})
		},
		"JobExtend: no TTL": func(ctx context.Context) error {
			_, err := f.d.JobExtend(ctx, &batondriver.JobExtendParams{Queue: q, Leases: []batondriver.JobLease{bogus}})
			return err
		},
		"JobFinish: an unknown outcome": func(ctx context.Context) error {
			_, err := f.d.JobFinish(ctx, &batondriver.JobFinishParams{Queue: q,
				Finished: []*batondriver.JobFinish{{JobLease: bogus, Outcome: "nope"}}})
			return err
		},
		"JobFinish: Fetch of none": func(ctx context.Context) error {
			_, err := f.d.JobFinish(ctx, &batondriver.JobFinishParams{Queue: q,
				Fetch: &batondriver.JobFinishFetch{LeaseTTL: time.Minute}})
			return err
		},
		"JobFinish of none: a negative Retention": func(ctx context.Context) error {
			_, err := f.d.JobFinish(ctx, &batondriver.JobFinishParams{Queue: q, Retention: -time.Second})
			return err
		},
		"JobGet: no ID": func(ctx context.Context) error {
			_, err := f.d.JobGet(ctx, &batondriver.JobGetParams{Queue: q})
			return err
		},
		"JobList: an unknown state": func(ctx context.Context) error {
			_, err := f.d.JobList(ctx, &batondriver.JobListParams{Queue: q, State: "nope"})
			return err
		},
		"JobRetry: no ID": func(ctx context.Context) error {
			_, err := f.d.JobRetry(ctx, &batondriver.JobGetParams{Queue: q})
			return err
		},
		"JobDelete: no queue": func(ctx context.Context) error {
			return f.d.JobDelete(ctx, &batondriver.JobGetParams{ID: unknownID})
		},
		"JobCancel: no reason": func(ctx context.Context) error {
			_, err := f.d.JobCancel(ctx, &batondriver.JobCancelParams{Queue: q, ID: unknownID})
			return err
		},
		"QueueStats: a bad queue name": func(ctx context.Context) error {
			_, err := f.d.QueueStats(ctx, &batondriver.QueueParams{Queue: "a queue"})
			return err
		},
		"QueuePause: no queue": func(ctx context.Context) error {
			return f.d.QueuePause(ctx, &batondriver.QueuePauseParams{})
		},
		"KeySetLimit: a negative limit": func(ctx context.Context) error {
			_, err := f.d.KeySetLimit(ctx, &batondriver.KeySetLimitParams{Queue: q, Key: "k", Limit: -1})
			return err
		},
		"KeyGet: no key": func(ctx context.Context) error {
			_, err := f.d.KeyGet(ctx, &batondriver.KeyParams{Queue: q})
			return err
		},
		"KeyList: a page over MaxPage": func(ctx context.Context) error {
			_, err := f.d.KeyList(ctx, &batondriver.KeyListParams{Queue: q, Limit: batondriver.MaxPage + 1})
			return err
		},
		"QueueScheduleRegister: no TTL": func(ctx context.Context) error {
			return f.d.QueueScheduleRegister(ctx, &batondriver.QueueScheduleParams{Queue: q, Name: "s", Kind: "test"})
		},
		"QueueScheduleList: no queue": func(ctx context.Context) error {
			_, err := f.d.QueueScheduleList(ctx, &batondriver.QueueParams{})
			return err
		},
	}
	requireBadParamsFirst(t, f.ctx, calls)
	stats, err := f.d.QueueStats(f.ctx, &batondriver.QueueParams{Queue: q})
	require.NoError(t, err)
	require.Empty(t, nonZero(stats.Counts), "a refused call stored a job")
}

// nonZero returns counts without its zero entries.
func nonZero(counts map[batondriver.JobState]int) map[batondriver.JobState]int {
	out := map[batondriver.JobState]int{}
	for s, n := range counts {
		if n != 0 {
			out[s] = n
		}
	}
	return out
}
