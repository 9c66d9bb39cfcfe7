package batonmem

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
)

// These tests look inside the memory driver at what the conformance suite
// cannot see: its indexes, its bounds, and a race between a wake and a
// cancelled wait.

func jobsSetup(t *testing.T) (*Driver, context.Context) {
	t.Parallel()
	return New(), t.Context()
}

// checkIndexes fails the test unless every job of q sits in exactly the
// index of its state, at the position it records, and every index is a heap.
func checkIndexes(t *testing.T, q *queueState) {
	t.Helper()
	n := 0
	check := func(name string, h *jobHeap, st batondriver.JobState) {
		t.Helper()
		for i, j := range h.jobs {
			switch {
			case j.row.State != st:
				t.Fatalf("%s job %s in the %s index", j.row.State, j.row.ID, name)
			case j.pos[h.slot] != i:
				t.Fatalf("job %s at %d of %s records %d", j.row.ID, i, name, j.pos[h.slot])
			case q.jobs[j.row.ID] != j:
				t.Fatalf("job %s of %s not in the queue's map", j.row.ID, name)
			case i > 0 && h.less(j, h.jobs[(i-1)/2]):
				t.Fatalf("%s out of heap order at %d", name, i)
			}
		}
	}
	for st, h := range q.states {
		n += h.Len()
		check(string(st), h, st)
	}
	banded := 0
	for i := range q.bands {
		check(fmt.Sprintf("band %d", i), &q.bands[i], batondriver.JobStateAvailable)
		for _, j := range q.bands[i].jobs {
			require.Equal(t, i, j.row.Priority, "job %s in the wrong band", j.row.ID)
		}
		banded += q.bands[i].Len()
	}
	require.Equal(t, len(q.jobs), n, "jobs outside every index")
	require.Equal(t, q.states[batondriver.JobStateAvailable].Len(), banded)
}

// TestIndexesStayConsistent runs random transitions, with leases and delays
// short enough to expire, and checks the indexes after each.
func TestIndexesStayConsistent(t *testing.T) {
	d, ctx := jobsSetup(t)
	const queue = "q"
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	var leased []*batondriver.JobRow
	var all []string
	outcomes := []batondriver.JobOutcome{
		batondriver.JobOutcomeCompleted, batondriver.JobOutcomeRetry, batondriver.JobOutcomeSnooze,
		batondriver.JobOutcomeCancel, batondriver.JobOutcomeDead,
	}
	ms := func(n int) time.Duration { return time.Duration(rng.IntN(n)) * time.Millisecond }
	for range 3000 {
		switch rng.IntN(8) {
		case 0, 1:
			var jobs []*batondriver.JobInsert
			for range 1 + rng.IntN(4) {
				jobs = append(jobs, &batondriver.JobInsert{
					Kind: "k", Priority: rng.IntN(batondriver.MaxPriority + 1), MaxAttempts: 1 + rng.IntN(3),
					RunAt: time.Now().Add(ms(10) - 3*time.Millisecond),
				})
			}
			res, err := d.JobInsert(ctx, &batondriver.JobInsertParams{Queue: queue, Jobs: jobs})
			require.NoError(t, err)
			for _, r := range res.Jobs {
				all = append(all, r.ID)
			}
		case 2, 3:
			res, err := d.JobFetch(ctx, &batondriver.JobFetchParams{Queue: queue, Max: 1 + rng.IntN(3), LeaseTTL: 1*time.Millisecond + ms(5), RecoverDelay: ms(3)})
			require.NoError(t, err)
			leased = append(leased, res.Jobs...)
		case 4:
			if len(leased) == 0 {
				continue
			}
			i := rng.IntN(len(leased))
			r := leased[i]
			leased = append(leased[:i], leased[i+1:]...)
			_, err := d.JobFinish(ctx, &batondriver.JobFinishParams{Queue: queue, Retention: ms(5), Finished: []*batondriver.JobFinish{{
				JobLease: batondriver.JobLease{ID: r.ID, Lease: r.Lease}, Outcome: outcomes[rng.IntN(len(outcomes))],
				RunAt: time.Now().Add(ms(6) - 3*time.Millisecond),
			}}})
			require.NoError(t, err)
		case 5:
			if len(leased) == 0 {
				continue
			}
			r := leased[rng.IntN(len(leased))]
			_, err := d.JobExtend(ctx, &batondriver.JobExtendParams{Queue: queue, TTL: 1*time.Millisecond + ms(5), Leases: []batondriver.JobLease{{ID: r.ID, Lease: r.Lease}}})
			require.NoError(t, err)
		case 6:
			if len(all) == 0 {
				continue
			}
			_, _ = d.JobRetry(ctx, &batondriver.JobGetParams{Queue: queue, ID: all[rng.IntN(len(all))]})
		case 7:
			if len(all) == 0 {
				continue
			}
			_ = d.JobDelete(ctx, &batondriver.JobGetParams{Queue: queue, ID: all[rng.IntN(len(all))]})
		}
		d.jobs.mu.Lock()
		if q := d.jobs.queues[queue]; q != nil {
			checkIndexes(t, q)
		}
		d.jobs.mu.Unlock()
	}
	st, err := d.QueueStats(ctx, &batondriver.QueueParams{Queue: queue})
	require.NoError(t, err)
	t.Logf("counts at the end: %v", st.Counts)
}

// TestFetchIsBounded: one fetch promotes at most fetchBatch due jobs, however
// many are due; the next fetch goes on.
func TestFetchIsBounded(t *testing.T) {
	d, ctx := jobsSetup(t)
	runAt := time.Now().Add(20 * time.Millisecond)
	jobs := make([]*batondriver.JobInsert, 2*fetchBatch+50)
	for i := range jobs {
		jobs[i] = &batondriver.JobInsert{Kind: "k", MaxAttempts: 1, RunAt: runAt}
	}
	_, err := d.JobInsert(ctx, &batondriver.JobInsertParams{Queue: "q", Jobs: jobs})
	require.NoError(t, err)
	time.Sleep(time.Until(runAt) + 5*time.Millisecond)
	p := &batondriver.JobFetchParams{Queue: "q", Max: 1, LeaseTTL: time.Second}
	for i, left := range []int{fetchBatch + 50, 50, 0} {
		res, err := d.JobFetch(ctx, p)
		require.NoError(t, err)
		require.Len(t, res.Jobs, 1)
		st, err := d.QueueStats(ctx, &batondriver.QueueParams{Queue: "q"})
		require.NoError(t, err)
		require.Equal(t, left, st.Counts[batondriver.JobStateScheduled], "after fetch %d", i+1)
		if left > 0 {
			require.Equal(t, runAt, res.NextRunAt, "overdue jobs are still next")
		}
	}
}

// TestCancelledWaitLosesNoToken: a wait whose ctx ends as a wake hands it
// the token either returns nil (it took the token) or passes the token on.
func TestCancelledWaitLosesNoToken(t *testing.T) {
	d, ctx := jobsSetup(t)
	const queue = "q"
	s := &d.jobs
	waiting := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		q := s.queues[queue]
		return q != nil && q.waiters.Len() == 1
	}
	took, passed := 0, 0
	for range 100 {
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- d.JobWait(wctx, &batondriver.JobWaitParams{Queue: queue, Timeout: time.Minute}) }()
		require.Eventually(t, waiting, 5*time.Second, 100*time.Microsecond)
		// Cancel while holding the lock, so that the waiter sees its ctx end
		// and then blocks on the lock; wake it before letting go.
		s.mu.Lock()
		cancel()
		time.Sleep(time.Millisecond)
		q := s.queues[queue]
		q.wake(1)
		s.mu.Unlock()
		err := <-done
		s.mu.Lock()
		left := q.tokens
		q.tokens = 0
		s.mu.Unlock()
		if err == nil {
			took++
			require.Zero(t, left, "a wait that returned nil left its token")
		} else {
			passed++
			require.ErrorIs(t, err, context.Canceled)
			require.Equal(t, 1, left, "a cancelled wait lost its token")
		}
	}
	require.Positive(t, passed, "the race was never run")
	t.Logf("took %d, passed on %d", took, passed)
}

// TestWakeTokensCapped: unclaimed tokens stop at maxWakeTokens.
func TestWakeTokensCapped(t *testing.T) {
	d, ctx := jobsSetup(t)
	jobs := make([]*batondriver.JobInsert, maxWakeTokens+10)
	for i := range jobs {
		jobs[i] = &batondriver.JobInsert{Kind: "k", MaxAttempts: 1}
	}
	_, err := d.JobInsert(ctx, &batondriver.JobInsertParams{Queue: "q", Jobs: jobs})
	require.NoError(t, err)
	d.jobs.mu.Lock()
	defer d.jobs.mu.Unlock()
	require.Equal(t, maxWakeTokens, d.jobs.queues["q"].tokens)
}

// TestFetchWakeTokens: a fetch wakes others for the due jobs it did not
// lease, and one that empties the available jobs drops unclaimed tokens.
func TestFetchWakeTokens(t *testing.T) {
	d, ctx := jobsSetup(t)
	tokens := func() int {
		d.jobs.mu.Lock()
		defer d.jobs.mu.Unlock()
		return d.jobs.queues["q"].tokens
	}
	runAt := time.Now().Add(20 * time.Millisecond)
	jobs := make([]*batondriver.JobInsert, 3)
	for i := range jobs {
		jobs[i] = &batondriver.JobInsert{Kind: "k", MaxAttempts: 1, RunAt: runAt}
	}
	_, err := d.JobInsert(ctx, &batondriver.JobInsertParams{Queue: "q", Jobs: jobs})
	require.NoError(t, err)
	require.Equal(t, 1, tokens(), "the new earliest scheduled time wakes one fetcher, whatever the number of jobs")
	_, err = d.JobInsert(ctx, &batondriver.JobInsertParams{Queue: "q", Jobs: []*batondriver.JobInsert{
		{Kind: "k", MaxAttempts: 1, RunAt: runAt.Add(time.Hour)},
	}})
	require.NoError(t, err)
	require.Equal(t, 1, tokens(), "a job due after the earliest woke a fetcher")
	time.Sleep(time.Until(runAt) + 5*time.Millisecond)
	fetch := func(max int) int {
		res, err := d.JobFetch(ctx, &batondriver.JobFetchParams{Queue: "q", Max: max, LeaseTTL: time.Second})
		require.NoError(t, err)
		return len(res.Jobs)
	}
	require.Equal(t, 1, fetch(1))
	require.Equal(t, 3, tokens(), "one token per due job left available, and the earlier one")
	require.Equal(t, 2, fetch(5))
	require.Zero(t, tokens(), "tokens kept with no job available")
}
