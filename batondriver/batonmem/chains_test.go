package batonmem

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
)

// These tests look at chained leases where the conformance suite does not:
// both outcomes of a chain in one call, the order of fences, and the
// unique claim of a chained job that goes back to its parked jobs.

// fetchChain fetches up to max jobs with chained leases for ttl.
func (f *keysFixture) fetchChain(max int, ttl time.Duration) []*batondriver.JobRow {
	f.t.Helper()
	res, err := f.d.JobFetch(f.t.Context(), &batondriver.JobFetchParams{Queue: keysQueue, Max: max, LeaseTTL: ttl, Chain: true})
	require.NoError(f.t, err)
	return res.Jobs
}

// claimant returns the ID of the job that holds unique key u's claim of
// scope, or "".
func (f *keysFixture) claimant(scope batondriver.UniqueScope, u string) string {
	f.d.jobs.mu.Lock()
	defer f.d.jobs.mu.Unlock()
	if c := f.d.jobs.queues[keysQueue].claims[claimKey{u, scope}]; c != nil {
		return c.id
	}
	return ""
}

// TestChainBothOutcomesInOneCall: whichever of a chain's outcomes comes
// first in one call, the slot ends with the next parked job, promoted once.
func TestChainBothOutcomesInOneCall(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		aheadFirst bool
	}{{"AheadFirst", true}, {"ChainedFirst", false}} {
		t.Run(tc.name, func(t *testing.T) {
			f := keysSetup(t)
			const k = "k"
			js := ids(f.insert(keyed(k, 1), keyed(k, 1), keyed(k, 1), keyed(k, 1)).Jobs)
			got := f.fetchChain(1, time.Minute)
			require.Equal(t, js[:2], ids(got))
			f.tokens()
			if tc.aheadFirst {
				// a hands its slot to b, whose own outcome then frees it.
				f.finish(batondriver.JobOutcomeCompleted, got[0], got[1])
			} else {
				// b frees nothing, then a frees its slot.
				f.finish(batondriver.JobOutcomeCompleted, got[1], got[0])
			}
			require.Equal(t, 1, f.tokens(), "one slot freed, one job promoted")
			require.Equal(t, batondriver.JobStateAvailable, f.state(js[2]))
			require.Equal(t, []string{js[3]}, f.parkedIDs(k))
			checkKeys(t, f.d)
		})
	}
}

// TestChainedFencesFollowLeased: the jobs chained by a call get fences
// after those of every job the call leased, and follow them in its result.
func TestChainedFencesFollowLeased(t *testing.T) {
	f := keysSetup(t)
	js := ids(f.insert(keyed("k1", 1), keyed("k2", 1), keyed("k1", 1), keyed("k2", 1)).Jobs)
	got := f.fetchChain(2, time.Minute)
	require.Equal(t, []string{js[0], js[1], js[2], js[3]}, ids(got))
	require.Equal(t, []string{"", "", js[0], js[1]}, []string{got[0].After, got[1].After, got[2].After, got[3].After})
	for i := 1; i < len(got); i++ {
		require.Greater(t, got[i].Fence, got[i-1].Fence)
	}
	checkKeys(t, f.d)
}

// TestUnchainedTakesQueuedClaimBack: a chained job gave up its queued-scope
// claim when leased; back among the parked jobs it claims again, unless a
// twin inserted meanwhile holds the claim.
func TestUnchainedTakesQueuedClaimBack(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		twin bool
	}{{"Free", false}, {"Twin", true}} {
		t.Run(tc.name, func(t *testing.T) {
			f := keysSetup(t)
			const k = "k"
			unique := func() *batondriver.JobInsert {
				j := keyed(k, 1)
				j.Unique = &batondriver.JobUnique{Key: "u", Scope: batondriver.UniqueQueued}
				return j
			}
			js := ids(f.insert(keyed(k, 1), unique()).Jobs)
			got := f.fetchChain(1, 20*time.Millisecond)
			require.Equal(t, js, ids(got))
			var other string
			if tc.twin {
				res := f.insert(unique())
				require.Equal(t, batondriver.JobInserted, res.Status[0], "a chained job is not queued")
				other = res.Jobs[0].ID
			}
			require.Eventually(t, func() bool {
				res, err := f.d.JobFetch(t.Context(), &batondriver.JobFetchParams{Queue: keysQueue, LeaseTTL: time.Minute, RecoverDelay: time.Hour})
				return err == nil && res.Recovered == 1
			}, 5*time.Second, time.Millisecond, "the expired lease taken back")
			require.Equal(t, batondriver.JobStateAvailable, f.state(js[1]))
			want := js[1]
			if tc.twin {
				want = other
			}
			require.Equal(t, want, f.claimant(batondriver.UniqueQueued, "u"))
			checkKeys(t, f.d)
		})
	}
}

// TestExtendAheadExtendsChained: a chain lives on one lease, whichever of
// its jobs is extended, and the chained job stays out of the expiry order.
func TestExtendAheadExtendsChained(t *testing.T) {
	f := keysSetup(t)
	const k = "k"
	f.insert(keyed(k, 1), keyed(k, 1))
	got := f.fetchChain(1, time.Minute)
	require.Len(t, got, 2)
	res, err := f.d.JobExtend(t.Context(), &batondriver.JobExtendParams{Queue: keysQueue, TTL: time.Hour,
		Leases: []batondriver.JobLease{{ID: got[0].ID, Lease: got[0].Lease}}})
	require.NoError(t, err)
	require.Empty(t, res.Lost)
	f.d.jobs.mu.Lock()
	defer f.d.jobs.mu.Unlock()
	q := f.d.jobs.queues[keysQueue]
	a, b := q.jobs[got[0].ID], q.jobs[got[1].ID]
	require.Equal(t, res.Now.Add(time.Hour), a.row.LeaseUntil)
	require.Equal(t, a.row.LeaseUntil, b.row.LeaseUntil)
	require.Same(t, a, q.states[batondriver.JobStateRunning].first(), "the chained job expires never on its own")
}
