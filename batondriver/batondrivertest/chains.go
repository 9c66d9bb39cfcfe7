package batondrivertest

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
)

// putBackWays name the ways a chained job goes back unrun (see putBack).
var putBackWays = []string{"Unchain", "GiveBackChained", "GiveBackAhead", "AheadExpired"}

// chainTTL is the lease to chain jobs for when they go back by way: short
// for AheadExpired, so that the job ahead's lease expires.
func chainTTL(way string) time.Duration {
	if way == "AheadExpired" {
		return 50 * time.Millisecond
	}
	return 10 * time.Second
}

// putBack puts job b, chained behind a (leased for chainTTL(way)), back
// unrun, by way: the outcome of a unchains it, b's own give-back comes
// first, a is given back, or a's lease expires (and is recovered).
func (f *jobFixture) putBack(way string, a, b *batondriver.JobRow) {
	f.t.Helper()
	switch way {
	case "Unchain":
		fin := outcome(a, batondriver.JobOutcomeCompleted, "", time.Time{})
		fin.Unchain = true
		require.Empty(f.t, f.finish(time.Hour, fin))
	case "GiveBackChained":
		require.Empty(f.t, f.finish(time.Hour, giveBack(b)))
	case "GiveBackAhead":
		require.Empty(f.t, f.finish(time.Hour, giveBack(a)))
	case "AheadExpired":
		f.recover(batondriver.JobFetchParams{LeaseTTL: 10 * time.Second, RecoverDelay: time.Hour})
	default:
		f.t.Fatalf("no way %q to put a chained job back", way)
	}
}

// fetchChain fetches up to max jobs with chained leases, for ttl.
func (f *jobFixture) fetchChain(max int, ttl time.Duration) *batondriver.JobFetchResult {
	f.t.Helper()
	return f.fetchP(batondriver.JobFetchParams{Max: max, LeaseTTL: ttl, Chain: true})
}

// finishChain records outcomes (completed jobs kept an hour) asking for
// chained leases, with fetch, if not nil; it requires none stale and
// returns the jobs leased.
func (f *jobFixture) finishChain(fetch *batondriver.JobFinishFetch, fs ...*batondriver.JobFinish) []*batondriver.JobRow {
	f.t.Helper()
	res, err := f.d.JobFinish(f.ctx, &batondriver.JobFinishParams{Queue: f.queue, Finished: fs,
		Retention: time.Hour, Fetch: fetch, Chain: true})
	require.NoError(f.t, err)
	require.Empty(f.t, res.Stale)
	return res.Jobs
}

// chain inserts three jobs of key k (limit 1) and fetches with chained
// leases for ttl: a runs, b is chained behind it, c stays parked.
func (f *jobFixture) chain(k string, ttl time.Duration, set ...func(j *batondriver.JobInsert)) (a, b, c *batondriver.JobRow) {
	f.t.Helper()
	js := f.insertRes(keyJob(k, 1), keyJob(k, 1, set...), keyJob(k, 1)).Jobs
	got := f.fetchChain(1, ttl).Jobs
	require.Equal(f.t, []string{js[0].ID, js[1].ID}, ids(got), "the holder, then the job chained behind it")
	require.Empty(f.t, got[0].After)
	require.Equal(f.t, got[0].ID, got[1].After)
	f.requireChained(k, map[string]string{got[0].ID: got[1].ID})
	return got[0], got[1], js[2]
}

// requireChained asserts the jobs chained behind the holders of key k:
// next maps each holder with a job chained behind it to that job's ID
// (nil: none). KeyGet shows each as its holder's Next and counts them in
// Chained, each is running with After naming its holder, and KeyList
// counts the key's jobs as KeyGet does.
func (f *jobFixture) requireChained(k string, next map[string]string) *batondriver.KeyInfo {
	f.t.Helper()
	if next == nil {
		next = map[string]string{}
	}
	info := f.keyGet(k)
	got := map[string]string{}
	for _, h := range info.Holders {
		if h.Next != "" {
			got[h.ID] = h.Next
		}
	}
	require.Equal(f.t, next, got, "the jobs chained behind the holders of %s", k)
	require.Equal(f.t, len(next), info.Chained, "chained")
	var fence int64
	for _, h := range info.Holders {
		if h.State == running {
			fence = max(fence, h.Fence)
		}
	}
	for h, c := range next {
		g := f.get(c)
		require.Equal(f.t, running, g.State, "chained job %s", c)
		require.Equal(f.t, h, g.After, "the job ahead of %s", c)
		fence = max(fence, g.Fence)
	}
	require.Equal(f.t, fence, info.Fence, "the key's fence: the highest of its running holders and chained jobs")
	res := f.keyList(1000, 0)
	i := slices.IndexFunc(res.Keys, func(l *batondriver.KeyInfo) bool { return l.Key == k })
	require.GreaterOrEqual(f.t, i, 0, "%s listed", k)
	l := res.Keys[i]
	require.Equal(f.t, []int{info.Holding, info.Running, info.Chained, info.Parked},
		[]int{l.Holding, l.Running, l.Chained, l.Parked}, "KeyList's holding, running, chained and parked")
	require.Equal(f.t, info.Fence, l.Fence, "KeyList's fence")
	return info
}

// requireUnchained asserts that chained job id, never attempted before,
// left its chain without running: in state want, its attempt not counted
// and no attempt's start shown, After cleared. It returns the job.
func (f *jobFixture) requireUnchained(id string, want batondriver.JobState) *batondriver.JobRow {
	f.t.Helper()
	g := f.get(id)
	require.Equal(f.t, want, g.State, "state of %s", id)
	require.Zero(f.t, g.Attempt, "a chained job that never ran has no attempt counted")
	require.True(f.t, g.AttemptedAt.IsZero(), "a chained job that never ran shows no attempt started, not %v", g.AttemptedAt)
	require.Empty(f.t, g.After)
	return g
}

// giveBack is the outcome of a client that will not run row to its end.
func giveBack(row *batondriver.JobRow) *batondriver.JobFinish {
	f := outcome(row, batondriver.JobOutcomeSnooze, "", time.Time{})
	f.GiveBack = true
	return f
}

// exerciseChains checks chained leases (JobFetchParams.Chain): a key's next
// parked job leased behind its running job, taking over its slot when that
// job's outcome is recorded, and back at the head of the parked jobs if
// that job's lease expires instead.
func exerciseChains(t *testing.T, newDriver func(t *testing.T) batondriver.JobDriver) {
	t.Run("FetchChainsNextParked", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a, b, c := f.chain(k, 10*time.Second)
		require.Greater(t, b.Fence, a.Fence, "a chained job's fence comes after the job ahead's")
		require.Equal(t, running, b.State)
		require.Equal(t, 1, b.Attempt, "a chained job's attempt is counted")
		require.NotEmpty(t, b.Lease)
		require.NotEqual(t, a.Lease, b.Lease)
		requireNear(t, a.LeaseUntil, b.LeaseUntil, storeSlack, "the chained job's lease is the job ahead's")
		g := f.get(b.ID)
		require.Equal(t, a.ID, g.After)
		require.Equal(t, running, g.State)
		require.Empty(t, f.get(a.ID).After)
		// Running, but no holder: the key's slot is a's. KeyInfo counts b
		// as chained, so that each of the key's three jobs shows.
		info := f.requireKey(k, []string{a.ID}, 1, 1)
		require.Equal(t, 1, info.Chained)
		require.Equal(t, b.ID, info.Holders[0].Next)
		require.Equal(t, 3, info.Holding+info.Chained+info.Parked)
		f.countsOf(map[batondriver.JobState]int{running: 2, parked: 1})
		require.ElementsMatch(t, []string{a.ID, b.ID}, ids(f.list(running, 10, 0).Jobs))
		require.Equal(t, []string{c.ID}, ids(f.list(parked, 10, 0).Jobs))
		// One chained job per job ahead, and none behind a chained job.
		require.Empty(t, f.fetchChain(5, 10*time.Second).Jobs)
		f.requireKey(k, []string{a.ID}, 1, 1)
		f.requireChained(k, map[string]string{a.ID: b.ID})
	})

	t.Run("KeyInfoCountsEachChain", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		js := f.insertRes(keyJob(k, 2), keyJob(k, 2), keyJob(k, 2), keyJob(k, 2), keyJob(k, 2)).Jobs
		got := f.fetchChain(2, 10*time.Second).Jobs
		require.Equal(t, []string{js[0].ID, js[1].ID, js[2].ID, js[3].ID}, ids(got), "two holders, a job chained behind each")
		f.requireKey(k, []string{js[0].ID, js[1].ID}, 2, 1)
		f.requireChained(k, map[string]string{got[2].After: got[2].ID, got[3].After: got[3].ID})
		// The chained job's outcome first: its holder has none behind it
		// now, though it has not finished.
		f.complete(got[2])
		f.requireKey(k, []string{js[0].ID, js[1].ID}, 2, 1)
		f.requireChained(k, map[string]string{got[3].After: got[3].ID})
		// The other holder's outcome: its chained job takes the slot.
		f.complete(f.get(got[3].After))
		f.requireKey(k, []string{got[2].After, got[3].ID}, 2, 1)
		f.requireChained(k, nil)
	})

	t.Run("NoChainUnasked", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		f.insertRes(keyJob(k, 1), keyJob(k, 1))
		got := f.fetch(1).Jobs
		require.Len(t, got, 1)
		f.requireKey(k, []string{got[0].ID}, 1, 1)
		require.Empty(t, f.fetch(1).Jobs)
	})

	t.Run("NoChainWhileOtherJobsAvailable", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		js := f.insertRes(keyJob(k, 1), keyJob(k, 1), newJob()).Jobs
		res := f.fetchChain(1, 10*time.Second)
		require.Equal(t, []string{js[0].ID}, ids(res.Jobs), "another job waits: fairness before chaining")
		require.True(t, res.More)
		f.requireState(parked, js[1].ID)
		f.requireState(available, js[2].ID)
	})

	t.Run("ChainOnceNothingElseAvailable", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		js := f.insertRes(keyJob(k, 1), keyJob(k, 1), newJob()).Jobs
		got := f.fetchChain(2, 10*time.Second).Jobs
		require.Equal(t, []string{js[0].ID, js[2].ID, js[1].ID}, ids(got))
		require.Equal(t, js[0].ID, got[2].After)
	})

	t.Run("NoChainWithoutParked", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		f.insertRes(keyJob(k, 2), keyJob(k, 2))
		got := f.fetchChain(5, 10*time.Second).Jobs
		require.Len(t, got, 2)
		for _, r := range got {
			require.Empty(t, r.After)
		}
	})

	outcomes := []struct {
		name    string
		outcome batondriver.JobOutcome
		runAt   time.Duration // from now; 0 for none
		want    batondriver.JobState
		parked  int // c, and a if it was parked again behind it
	}{
		{"Completed", batondriver.JobOutcomeCompleted, 0, completed, 1},
		{"Retry", batondriver.JobOutcomeRetry, time.Hour, scheduled, 1},
		{"Snooze", batondriver.JobOutcomeSnooze, time.Hour, scheduled, 1},
		{"Cancel", batondriver.JobOutcomeCancel, 0, cancelled, 1},
		{"Dead", batondriver.JobOutcomeDead, 0, dead, 1},
		{"AgainNow", batondriver.JobOutcomeAgain, 0, parked, 2},
	}
	for _, o := range outcomes {
		t.Run("FinishHandsSlotToChained"+o.name, func(t *testing.T) {
			f := newJobFixture(t, newDriver)
			k := key("k")
			a, b, c := f.chain(k, 10*time.Second)
			var at time.Time
			if o.runAt != 0 {
				at = time.Now().Add(o.runAt)
			}
			f.done(a, o.outcome, at)
			f.requireState(o.want, a.ID)
			g := f.get(b.ID)
			require.Empty(t, g.After, "once the job ahead's outcome is recorded, b runs on its own")
			require.Equal(t, running, g.State)
			require.Equal(t, b.Lease, g.Lease, "b keeps its lease")
			require.Equal(t, b.Fence, g.Fence)
			requireNear(t, a.LeaseUntil, g.LeaseUntil, storeSlack, "b's lease lasts as a's did")
			// b took a's slot; nothing was promoted, nor chained (unasked).
			f.requireKey(k, []string{b.ID}, 1, o.parked)
			f.requireChained(k, nil)
			f.requireState(parked, c.ID)
			require.Empty(t, f.fetch(5).Jobs)
			// b's own outcome frees the slot for c, at the head.
			f.complete(g)
			f.requireState(available, c.ID)
		})
	}

	t.Run("FinishUnchains", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a, b, c := f.chain(k, 10*time.Second)
		fin := outcome(a, batondriver.JobOutcomeCompleted, "", time.Time{})
		fin.Unchain = true
		require.Empty(t, f.finishChain(nil, fin), "nothing chained: b does not run")
		f.requireState(completed, a.ID)
		// b went back to the head of the parked jobs, then took the freed
		// slot: available before c, its attempt not counted.
		f.requireUnchained(b.ID, available)
		f.requireKey(k, []string{b.ID}, 0, 1)
		f.requireChained(k, nil)
		f.requireState(parked, c.ID)
		require.Equal(t, []string{b.ID}, f.finish(time.Hour, outcome(b, batondriver.JobOutcomeCompleted, "", time.Time{})),
			"b's chained lease is stale")
	})

	t.Run("FinishChainsBehindChained", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a, b, c := f.chain(k, 10*time.Second)
		d := f.insertIn(parked, keyJob(k, 1))
		got := f.finishChain(nil, outcome(a, batondriver.JobOutcomeCompleted, "", time.Time{}))
		require.Equal(t, []string{c.ID}, ids(got), "c chained behind b, which took a's slot")
		require.Equal(t, b.ID, got[0].After)
		require.Greater(t, got[0].Fence, b.Fence)
		requireNear(t, a.LeaseUntil, got[0].LeaseUntil, storeSlack)
		f.requireKey(k, []string{b.ID}, 1, 1)
		f.requireChained(k, map[string]string{b.ID: c.ID})
		got = f.finishChain(nil, outcome(b, batondriver.JobOutcomeCompleted, "", time.Time{}))
		require.Equal(t, []string{d.ID}, ids(got))
		require.Equal(t, c.ID, got[0].After)
		f.requireKey(k, []string{c.ID}, 1, 0)
		f.requireChained(k, map[string]string{c.ID: d.ID})
		// Nothing parked is left to chain behind d.
		c2 := f.get(c.ID)
		require.Empty(t, f.finishChain(nil, outcome(c2, batondriver.JobOutcomeCompleted, "", time.Time{})))
		f.requireKey(k, []string{d.ID}, 1, 0)
		f.requireChained(k, nil)
	})

	t.Run("FinishFetchChainsBehindLeased", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		h := f.hold(k, 1, 10*time.Second)
		p1 := f.insertIn(parked, keyJob(k, 1))
		p2 := f.insertIn(parked, keyJob(k, 1))
		got := f.finishChain(&batondriver.JobFinishFetch{Max: 1, LeaseTTL: 10 * time.Second},
			outcome(h, batondriver.JobOutcomeCompleted, "", time.Time{}))
		require.Equal(t, []string{p1.ID, p2.ID}, ids(got), "p1 promoted and leased, p2 chained behind it")
		require.Empty(t, got[0].After)
		require.Equal(t, p1.ID, got[1].After)
		f.requireKey(k, []string{p1.ID}, 1, 0)
		f.requireChained(k, map[string]string{p1.ID: p2.ID})
	})

	t.Run("HaltedKeyChainsNoMore", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a, b, c := f.chain(k, 10*time.Second)
		info := f.setLimit(k, 0)
		require.Equal(t, 1, info.Chained, "a halt leaves a chained job chained")
		require.Equal(t, []*batondriver.KeyHolder{{ID: a.ID, State: running, Fence: a.Fence, LeaseUntil: info.Holders[0].LeaseUntil, Next: b.ID}},
			info.Holders)
		f.requireChained(k, map[string]string{a.ID: b.ID})
		// b was leased before the halt: it takes a's slot, but nothing is
		// chained behind it, and c stays parked.
		require.Empty(t, f.finishChain(nil, outcome(a, batondriver.JobOutcomeCompleted, "", time.Time{})))
		f.requireKey(k, []string{b.ID}, 1, 1)
		f.requireChained(k, nil)
		require.Empty(t, f.finishChain(nil, outcome(f.get(b.ID), batondriver.JobOutcomeCompleted, "", time.Time{})))
		f.requireState(parked, c.ID)
	})

	t.Run("BothOutcomesInOneCall", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a, b, c := f.chain(k, 10*time.Second)
		f.finishChain(nil, outcome(a, batondriver.JobOutcomeCompleted, "", time.Time{}),
			outcome(b, batondriver.JobOutcomeCompleted, "", time.Time{}))
		f.requireState(completed, a.ID, b.ID)
		require.Empty(t, f.list(running, 10, 0).Jobs, "b, handed a's slot and done in the same call, is not running")
		f.requireState(available, c.ID)
		f.requireKey(k, []string{c.ID}, 0, 0)
		f.requireChained(k, nil)
	})

	// The job ahead's outcome, then the chained job's, in one call that
	// deletes completed jobs at once and leases and chains: the chained
	// job, handed the slot and then done, gets nothing chained behind it;
	// the job promoted into its freed slot is leased, and the next parked
	// job chained behind that one.
	t.Run("BothOutcomesInOneCallDeletedThenChain", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a, b, c := f.chain(k, 10*time.Second)
		d := f.insertIn(parked, keyJob(k, 1))
		res, err := f.d.JobFinish(f.ctx, &batondriver.JobFinishParams{Queue: f.queue, Chain: true,
			Fetch: &batondriver.JobFinishFetch{Max: 1, LeaseTTL: 10 * time.Second},
			Finished: []*batondriver.JobFinish{outcome(a, batondriver.JobOutcomeCompleted, "", time.Time{}),
				outcome(b, batondriver.JobOutcomeCompleted, "", time.Time{})}})
		require.NoError(t, err)
		require.Empty(t, res.Stale)
		require.Equal(t, []string{c.ID, d.ID}, ids(res.Jobs), "c promoted and leased, d chained behind it")
		require.Equal(t, c.ID, res.Jobs[1].After)
		f.requireGone(a.ID)
		f.requireGone(b.ID)
		f.requireKey(k, []string{c.ID}, 1, 0)
		f.requireChained(k, map[string]string{c.ID: d.ID})
	})

	// The chained job's outcome, then the job ahead's, in one call: the
	// chained job has ended, so the slot it would have taken over is freed
	// and the next parked job promoted, whether completed jobs are kept or
	// deleted at once, and whether the job ahead's outcome asks to unchain.
	for _, tc := range []struct {
		name      string
		retention time.Duration
		unchain   bool
	}{{"Kept", time.Hour, false}, {"Deleted", 0, false}, {"DeletedUnchain", 0, true}} {
		t.Run("BothOutcomesInOneCallChainedFirst"+tc.name, func(t *testing.T) {
			f := newJobFixture(t, newDriver)
			k := key("k")
			a, b, c := f.chain(k, 10*time.Second)
			fa := outcome(a, batondriver.JobOutcomeCompleted, "", time.Time{})
			fa.Unchain = tc.unchain
			require.Empty(t, f.finish(tc.retention, outcome(b, batondriver.JobOutcomeCompleted, "", time.Time{}), fa))
			if tc.retention > 0 {
				f.requireState(completed, a.ID, b.ID)
			} else {
				f.requireGone(a.ID)
				f.requireGone(b.ID)
			}
			require.Empty(t, f.list(running, 10, 0).Jobs)
			f.requireState(available, c.ID)
			f.requireKey(k, []string{c.ID}, 0, 0)
			f.requireChained(k, nil)
			f.countsOf(map[batondriver.JobState]int{available: 1, completed: map[bool]int{true: 2}[tc.retention > 0]})
		})
	}

	// A chained job given back (snoozed until now) before the outcome of the
	// job ahead keeps its place: it goes back to the head of the parked
	// jobs, its attempt not counted, and runs before the jobs behind it.
	t.Run("ChainedGivenBackToHead", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a, b, c := f.chain(k, 10*time.Second)
		require.Empty(t, f.finish(time.Hour, outcome(b, batondriver.JobOutcomeSnooze, "", time.Time{})))
		f.requireUnchained(b.ID, parked)
		f.requireKey(k, []string{a.ID}, 1, 2)
		f.requireChained(k, nil)
		f.complete(a)
		f.requireState(available, b.ID)
		f.requireState(parked, c.ID)
		f.requireKey(k, []string{b.ID}, 0, 1)
	})

	// A job given back (JobFinish.GiveBack: its client is stopping) keeps
	// its key's slot, and the job chained behind it goes back to the head
	// of the parked jobs: the key's order survives a stop, whichever of
	// the two outcomes comes first in the call. (The holder's comes first:
	// it unchains the chained job, whose own outcome is then stale.)
	for _, first := range []string{"Holder", "Chained"} {
		t.Run("GiveBackKeepsKeyOrder"+first+"First", func(t *testing.T) {
			f := newJobFixture(t, newDriver)
			k := key("k")
			a, b, c := f.chain(k, 10*time.Second)
			back := []*batondriver.JobFinish{giveBack(a), giveBack(b)}
			stale := []string{b.ID}
			if first == "Chained" {
				back[0], back[1] = back[1], back[0]
				stale = nil
			}
			require.Equal(t, stale, f.finish(time.Hour, back...))
			g := f.get(a.ID)
			require.Equal(t, available, g.State)
			require.Zero(t, g.Attempt, "a job given back has no attempt counted")
			require.Empty(t, g.Lease)
			f.requireUnchained(b.ID, parked)
			f.requireKey(k, []string{a.ID}, 0, 2)
			f.requireChained(k, nil)
			f.requireState(parked, c.ID)
			f.cycle(a.ID, b.ID, c.ID)
		})
	}

	// A chained job its client gives back after the outcome of the job
	// ahead (which handed it the slot) keeps the slot as any holder does:
	// it runs before the key's other parked jobs.
	t.Run("GiveBackAfterAheadsOutcomeKeepsSlot", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a, b, c := f.chain(k, 10*time.Second)
		f.complete(a)
		f.requireKey(k, []string{b.ID}, 1, 1)
		require.Empty(t, f.finish(time.Hour, giveBack(b)))
		// Given back as a holder, not unchained: see GiveBack.
		g := f.get(b.ID)
		require.Equal(t, available, g.State)
		require.Zero(t, g.Attempt, "a job given back has no attempt counted")
		require.Empty(t, g.After)
		f.requireKey(k, []string{b.ID}, 0, 1)
		f.cycle(b.ID, c.ID)
	})

	t.Run("GiveBackKeepsSlotWithNothingChained", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a := f.hold(k, 1, 10*time.Second, onBusy(batondriver.OnBusyDrop))
		b := f.insertIn(parked, keyJob(k, 1))
		require.Empty(t, f.finish(time.Hour, giveBack(a)))
		f.requireKey(k, []string{a.ID}, 0, 1)
		require.EqualValues(t, 0, f.stats().Dropped, "a job given back is not admitted again: no policy applies")
		f.cycle(a.ID, b.ID)
	})

	// A slot freed while a job was chained (another holder finished: the
	// key had nothing parked to promote) goes to it when it is given back
	// to the head of the parked jobs, in the same step: a key with a free
	// slot keeps no job parked. Both ways back: the chained job given back
	// on its own, and the job ahead given back, which unchains it.
	for _, back := range []string{"Chained", "Ahead"} {
		t.Run("GiveBack"+back+"WithFreeSlotPromotes", func(t *testing.T) {
			f := newJobFixture(t, newDriver)
			k := key("k")
			f.insertRes(keyJob(k, 2), keyJob(k, 2), keyJob(k, 2))
			got := f.fetchChain(2, 10*time.Second).Jobs
			require.Len(t, got, 3)
			x, h, c := got[0], got[1], got[2]
			require.Equal(t, x.ID, c.After)
			f.complete(h)
			given := c
			if back == "Ahead" {
				given = x // which unchains c
			}
			require.Empty(t, f.finish(time.Hour, giveBack(given)))
			require.Zero(t, f.keyGet(k).Parked)
			f.requireState(available, given.ID, c.ID)
		})
	}

	t.Run("GiveBackOverLimitWaitsAtHead", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		js := f.insertRes(keyJob(k, 2), keyJob(k, 2), keyJob(k, 2)).Jobs
		got := f.fetch(2).Jobs
		require.Equal(t, []string{js[0].ID, js[1].ID}, ids(got))
		f.setLimit(k, 1) // both keep running
		require.Empty(t, f.finish(time.Hour, giveBack(got[1])))
		// Over the limit, the job given back gives its slot up, and waits
		// ahead of the job parked before it was leased.
		g := f.get(got[1].ID)
		require.Equal(t, parked, g.State)
		require.Zero(t, g.Attempt)
		f.requireKey(k, []string{got[0].ID}, 1, 2)
		f.complete(got[0])
		f.requireState(available, got[1].ID)
		f.requireState(parked, js[2].ID)
	})

	t.Run("ChainedOutcomeFirst", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a, b, c := f.chain(k, 10*time.Second)
		f.complete(b)
		f.requireState(completed, b.ID)
		// b held no slot: a still holds it, with nothing chained behind it
		// any more, and c waits.
		f.requireKey(k, []string{a.ID}, 1, 1)
		f.requireChained(k, nil)
		f.requireState(parked, c.ID)
		f.complete(a)
		f.requireState(available, c.ID)
		f.requireKey(k, []string{c.ID}, 0, 0)
	})

	t.Run("ExpiredAheadReturnsChainedToHead", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a, b, c := f.chain(k, 50*time.Millisecond)
		res := f.recover(batondriver.JobFetchParams{LeaseTTL: 10 * time.Second, RecoverDelay: time.Hour})
		require.Equal(t, 1, res.Recovered, "only the job ahead's lease is taken back")
		f.requireState(scheduled, a.ID)
		// b went back to the head of the parked jobs, then took the freed
		// slot: available before c.
		g := f.requireUnchained(b.ID, available)
		require.Empty(t, g.Lease)
		require.Empty(t, g.Errors)
		f.requireKey(k, []string{b.ID}, 0, 1)
		f.requireChained(k, nil)
		f.requireState(parked, c.ID)
		got := f.fetch(5).Jobs
		require.Equal(t, []string{b.ID}, ids(got))
		require.Equal(t, 1, got[0].Attempt)
		require.Greater(t, got[0].Fence, b.Fence)
		// b's stale lease from the chain is worth nothing now.
		require.Equal(t, []string{b.ID}, f.finish(time.Hour, outcome(b, batondriver.JobOutcomeCompleted, "", time.Time{})))
	})

	// A chained job put back without running gets back the AttemptedAt of
	// its last counted attempt, as it gets back its Attempt, whichever way
	// it goes back: the job ahead's outcome unchains it, its own give-back
	// comes first, the job ahead is given back, or the job ahead's lease
	// expires.
	for _, way := range putBackWays {
		t.Run("UnchainedRestoresAttemptedAt"+way, func(t *testing.T) {
			f := newJobFixture(t, newDriver)
			k := key("k")
			ttl := chainTTL(way)
			// b fails its first attempt and, due again at once, parks
			// behind a, which its freed slot promoted.
			b := f.hold(k, 1, time.Hour)
			a := f.insertIn(parked, keyJob(k, 1))
			f.done(b, batondriver.JobOutcomeRetry, time.Time{})
			f.requireState(available, a.ID)
			f.requireState(parked, b.ID)
			first := f.get(b.ID)
			require.Equal(t, 1, first.Attempt)
			requireNear(t, b.AttemptedAt, first.AttemptedAt, storeSlack)
			time.Sleep(3 * time.Millisecond) // the chained attempt starts a millisecond later at least
			got := f.fetchChain(1, ttl).Jobs
			require.Equal(t, []string{a.ID, b.ID}, ids(got))
			a, b = got[0], got[1]
			require.Equal(t, 2, b.Attempt)
			require.True(t, b.AttemptedAt.After(first.AttemptedAt), "the chained attempt's start %v, after %v", b.AttemptedAt, first.AttemptedAt)
			f.putBack(way, a, b)
			g := f.get(b.ID)
			require.Contains(t, []batondriver.JobState{parked, available}, g.State)
			require.Empty(t, g.After)
			require.Equal(t, 1, g.Attempt, "the chained attempt is not counted")
			require.True(t, first.AttemptedAt.Equal(g.AttemptedAt),
				"AttemptedAt %v: not that of the last counted attempt, %v", g.AttemptedAt, first.AttemptedAt)
		})
	}

	t.Run("ExtendChainedExtendsAhead", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a, b, _ := f.chain(k, 300*time.Millisecond)
		res := f.extend(10*time.Second, lease(b))
		require.Empty(t, res.Lost)
		requireNear(t, time.Now().Add(10*time.Second), f.get(a.ID).LeaseUntil, clockSlack, "the job ahead's lease extended")
		requireNear(t, time.Now().Add(10*time.Second), f.get(b.ID).LeaseUntil, clockSlack)
		time.Sleep(400 * time.Millisecond)
		require.Zero(t, f.fetch(0).Recovered, "nothing expired")
		f.requireState(running, a.ID, b.ID)
		require.Equal(t, []string{b.ID}, f.extend(time.Second, batondriver.JobLease{ID: b.ID, Lease: a.Lease}).Lost)
	})

	// A client that stops as a fetch brings it a job and the job chained
	// behind it gives both back (snoozed until now) in one call, the job
	// ahead first: its outcome hands the chained job its slot, so the
	// chained job's own give-back must free that slot, not park the job
	// while it still holds it (which left the key with a phantom holder:
	// nothing could run again).
	t.Run("BothGivenBackInOneCall", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a, b, c := f.chain(k, 10*time.Second)
		require.Empty(t, f.finish(time.Hour, outcome(a, batondriver.JobOutcomeSnooze, "", time.Time{}),
			outcome(b, batondriver.JobOutcomeSnooze, "", time.Time{})))
		f.requireKey(k, []string{c.ID}, 0, 2)
		f.requireChained(k, nil)
		f.requireState(available, c.ID)
		f.requireState(parked, a.ID, b.ID)
		require.Zero(t, f.get(b.ID).Attempt, "b never ran")
		f.cycle(c.ID, a.ID, b.ID)
		f.requireIdle(k)
	})

	// A job chained behind one whose lease is lost goes back to the head
	// of the parked jobs, and is promoted under its own default limit, as
	// every parked job is, even when the key's default changed meanwhile.
	// ab chains b behind a, key k's only other job, then admits x, of
	// default 3, and leases it: 1 holder < 3, nothing parked.
	ab := func(f *jobFixture, k string, ttl time.Duration) (a, b, x *batondriver.JobRow) {
		js := f.insertRes(keyJob(k, 1), keyJob(k, 1)).Jobs
		got := f.fetchChain(1, ttl).Jobs
		require.Equal(f.t, ids(js), ids(got))
		require.Equal(f.t, js[0].ID, got[1].After)
		x = f.insertIn(available, keyJob(k, 3))
		require.Equal(f.t, []string{x.ID}, ids(f.fetch(1).Jobs))
		return got[0], got[1], x
	}
	t.Run("UnchainedKeepsItsDefault", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a, b, x := ab(f, k, 10*time.Second)
		fin := outcome(a, batondriver.JobOutcomeCompleted, "", time.Time{})
		fin.Unchain = true
		require.Empty(t, f.finishChain(nil, fin))
		// x holds the key: b's default of 1 is full.
		f.requireKey(k, []string{x.ID}, 1, 1)
		f.requireUnchained(b.ID, parked)
		f.complete(f.get(x.ID))
		f.requireKey(k, []string{b.ID}, 0, 0)
	})

	t.Run("ExpiredAheadUnchainedKeepsItsDefault", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a, b, x := ab(f, k, 50*time.Millisecond)
		res := f.recover(batondriver.JobFetchParams{LeaseTTL: 10 * time.Second, RecoverDelay: time.Hour})
		require.Equal(t, 1, res.Recovered)
		f.requireState(scheduled, a.ID)
		f.requireKey(k, []string{x.ID}, 1, 1)
		f.requireUnchained(b.ID, parked)
	})

	// A job is chained only where it could be promoted: under the key's
	// override, else its own default limit, counting the slot it would
	// take over. A job of default 1 waits for a key that three jobs of
	// default 3 hold, chained or not.
	t.Run("ChainAsksTheChainedJobsDefault", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		js := f.insertRes(keyJob(k, 3), keyJob(k, 3), keyJob(k, 3)).Jobs
		d := f.insertIn(parked, keyJob(k, 1))
		got := f.fetchChain(3, 10*time.Second).Jobs
		require.Equal(t, ids(js), ids(got), "d is not chained: 3 holders >= its limit 1")
		f.requireKey(k, ids(js), 3, 1)
		f.requireChained(k, nil)
		f.requireState(parked, d.ID)
		// Nor when one of them finishes and the finish asks for chains.
		require.Empty(t, f.finishChain(&batondriver.JobFinishFetch{Max: 1, LeaseTTL: 10 * time.Second},
			outcome(got[0], batondriver.JobOutcomeCompleted, "", time.Time{})))
		f.requireKey(k, ids(js[1:]), 2, 1)
		f.complete(got[1])
		f.requireState(parked, d.ID)
		f.complete(got[2])
		f.requireKey(k, []string{d.ID}, 0, 0)
	})

	// Twins unique while running, queued one behind the other on a key of
	// limit 1: leased with a chain, both run, and the claim is the chained
	// job's, which runs last. Once the job ahead is done, the chained job
	// runs on alone and a third twin still conflicts with it.
	t.Run("UniqueRunningTwinsChained", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		u := uniqueKey(t)
		js := f.insertRes(keyJob(k, 1, uniq(u, inRunning, reject)), keyJob(k, 1, uniq(u, inRunning, reject))).Jobs
		got := f.fetchChain(1, 10*time.Second).Jobs
		require.Equal(t, ids(js), ids(got))
		require.Equal(t, js[0].ID, got[1].After)
		_, twin := f.insertAs(batondriver.JobRejected, uniqueJob(u, inRunning, reject))
		require.Equal(t, "duplicate of "+got[1].ID, twin)
		f.complete(got[0])
		f.requireState(running, got[1].ID)
		f.insertAs(batondriver.JobRejected, uniqueJob(u, inRunning, reject))
		f.complete(f.get(got[1].ID))
		f.insertAs(batondriver.JobInserted, uniqueJob(u, inRunning, reject))
	})

	t.Run("UniqueClaimsFollowTheChain", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		u := uniqueKey(t)
		_, b, _ := f.chain(k, 50*time.Millisecond, uniq(u, inRunning, reject))
		// Chained, b runs: it claims u while running.
		f.insertAs(batondriver.JobRejected, uniqueJob(u, inRunning, reject))
		f.recover(batondriver.JobFetchParams{LeaseTTL: 10 * time.Second, RecoverDelay: time.Hour})
		f.requireState(available, b.ID)
		f.insertAs(batondriver.JobInserted, uniqueJob(u, inRunning, reject))
	})

	exerciseMixedDefaults(t, newDriver)
	exerciseMixedDefaultsGiveBack(t, newDriver)
}
