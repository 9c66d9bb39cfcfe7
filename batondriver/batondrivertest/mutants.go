package batondrivertest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
)

// requireKeyOrder asserts that KeyList lists exactly the keys want, in that
// order, and that the order is the documented one for the counts it
// reports: most parked first, then by key. A backend that keeps the order
// in an index of its own (Redis's KI, scored by the parked count) must
// keep that index in step with every transition that parks or unparks.
func (f *jobFixture) requireKeyOrder(want ...string) {
	f.t.Helper()
	res := f.keyList(1000, 0)
	got := []string{}
	for _, info := range res.Keys {
		got = append(got, info.Key)
	}
	require.Equal(f.t, want, got, "KeyList's order")
	require.True(f.t, slices.IsSortedFunc(res.Keys, func(a, b *batondriver.KeyInfo) int {
		if a.Parked != b.Parked {
			return b.Parked - a.Parked
		}
		return strings.Compare(a.Key, b.Key)
	}), "KeyList most parked first, then by key")
}

// drainWakes takes every wake token the queue holds: it waits until a
// JobWait times out.
func (f *jobFixture) drainWakes() {
	f.t.Helper()
	const timeout = 50 * time.Millisecond
	for range 100 {
		w := f.waitResult(f.wait(f.ctx, timeout))
		require.NoError(f.t, w.err)
		if w.took >= timeout-10*time.Millisecond {
			return
		}
	}
	f.t.Fatal("wake tokens without end")
}

// requireWakes asserts that do, which makes a job available, wakes a
// fetcher waiting on the queue, which holds no wake token before it.
func (f *jobFixture) requireWakes(what string, do func()) {
	f.t.Helper()
	f.drainWakes()
	ch := f.wait(f.ctx, 5*time.Second)
	time.Sleep(50 * time.Millisecond) // let it wait
	do()
	w := f.waitResult(ch)
	require.NoError(f.t, w.err)
	require.Less(f.t, w.took, 2500*time.Millisecond, "%s woke no fetcher", what)
}

// staleChainLink leaves key k (limit 2) with holder a1 whose link to the
// job chained behind it went stale: that job's own outcome (a retry) came
// first, parking it again behind the full key, and then the other holder's
// slot went to it and it was leased on its own, as again.
func (f *jobFixture) staleChainLink(k string) (a1, again *batondriver.JobRow) {
	f.t.Helper()
	js := f.insertRes(keyJob(k, 2), keyJob(k, 2), keyJob(k, 2)).Jobs
	got := f.fetchChain(2, 10*time.Second).Jobs
	require.Equal(f.t, ids(js), ids(got), "two holders, then the job chained behind the first")
	a1, a2, b := got[0], got[1], got[2]
	require.Equal(f.t, a1.ID, b.After)
	f.requireChained(k, map[string]string{a1.ID: b.ID})
	f.done(b, batondriver.JobOutcomeRetry, time.Time{})
	f.requireState(parked, b.ID)
	f.requireChained(k, nil)
	f.complete(a2)
	again = f.fetchOne(10 * time.Second)
	require.Equal(f.t, b.ID, again.ID)
	return a1, again
}

// exerciseMutants holds tests written to kill mutants of a backend's
// transitions (the Redis scripts) that the rest of the suite let live:
// each checks behaviour the other tests leave open.
func exerciseMutants(t *testing.T, newDriver func(t *testing.T) batondriver.JobDriver) {
	// A job unique while queued gave its claim up when it started; given
	// back at Stop, it is queued again and takes the claim back, so that a
	// twin inserted then resolves to it.
	// A holder given back at its key's limit (not over it) keeps its slot:
	// available again, not parked.
	t.Run("GivenBackAtTheLimitKeepsItsSlot", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("g")
		f.insertIn(available, keyJob(k, 1))
		r := f.fetchOne(time.Minute)
		back := outcome(r, batondriver.JobOutcomeSnooze, "", time.Time{})
		back.GiveBack = true
		require.Empty(t, f.finish(0, back))
		require.Equal(t, batondriver.JobStateAvailable, f.get(r.ID).State)
		f.requireKey(k, []string{r.ID}, 0, 0)
	})

	t.Run("GivenBackQueuedScopeReclaims", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		r := f.runTwin(uniqueJob("u", queued, existing))
		back := outcome(r, batondriver.JobOutcomeSnooze, "", time.Time{})
		back.GiveBack = true
		require.Empty(t, f.finish(0, back))
		require.Equal(t, batondriver.JobStateAvailable, f.get(r.ID).State)
		row, _ := f.insertAs(batondriver.JobDuplicate, uniqueJob("u", queued, existing))
		require.Equal(t, r.ID, row.ID, "the given-back job took its claim back")
	})

	// Chaining a key's parked job takes it off the parked count, and giving
	// it back puts it on again: KeyList's order follows both.
	// A chain that takes a key's parked head leaves the next job at the
	// head. With mixed defaults, one whose own default admits it beside
	// the holders is promoted in that step, as a freed slot would promote
	// it, and wakes a fetcher: a key with a free slot keeps no job parked.
	// By a fetch and by a finish that leases (mutant M27 showed the gap).
	for _, by := range []string{"Fetch", "Finish"} {
		t.Run("ChainPromotesHeadItsDefaultAdmitsBy"+by, func(t *testing.T) {
			f := newJobFixture(t, newDriver)
			k := key("k")
			var a, b, p *batondriver.JobRow
			var jobs []*batondriver.JobRow
			if by == "Fetch" {
				a = f.insertIn(available, keyJob(k, 1))
				b = f.insertIn(parked, keyJob(k, 1))
				p = f.insertIn(parked, keyJob(k, 3)) // b waits before it
				f.drainWakes()
				res := f.fetchChain(1, time.Minute)
				require.True(t, res.More, "the promoted job is available")
				jobs = res.Jobs
			} else {
				u := f.insertOne(newJob())
				a = f.insertIn(available, keyJob(k, 1))
				b = f.insertIn(parked, keyJob(k, 1))
				p = f.insertIn(parked, keyJob(k, 3))
				held := f.fetch(1).Jobs // u, leaving a available
				require.Equal(t, u.ID, held[0].ID)
				f.drainWakes()
				jobs = f.finishChain(&batondriver.JobFinishFetch{Max: 1, LeaseTTL: time.Minute}, outcome(held[0], batondriver.JobOutcomeCompleted, "", time.Time{}))
			}
			require.Equal(t, []string{a.ID, b.ID}, ids(jobs), "a leased, b chained behind it")
			f.requireState(available, p.ID)
			f.requireKey(k, []string{a.ID, p.ID}, 1, 0)
			w := f.waitResult(f.wait(f.ctx, 5*time.Second))
			require.NoError(t, w.err)
			require.Less(t, w.took, 2500*time.Millisecond, "the promotion woke no fetcher")
		})
	}

	t.Run("KeyListOrderFollowsChains", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		ka, kb := key("a"), key("b")
		js := f.insertRes(keyJob(kb, 1), keyJob(kb, 1), keyJob(kb, 1), keyJob(ka, 1), keyJob(ka, 1), keyJob(ka, 1)).Jobs
		f.requireKeyOrder(ka, kb) // two parked each: by name
		// b's holder leased with a's left available: nothing chained.
		require.Equal(t, []string{js[0].ID}, ids(f.fetchChain(1, time.Minute).Jobs))
		f.requireKeyOrder(ka, kb)
		// a's holder leased, nothing left available: a's next chained.
		got := f.fetchChain(1, time.Minute).Jobs
		require.Equal(t, []string{js[3].ID, js[4].ID}, ids(got))
		f.requireKey(ka, []string{js[3].ID}, 1, 1)
		f.requireKeyOrder(kb, ka) // b has two parked, a one
		// The chained job given back is parked again, at the head.
		require.Empty(t, f.finish(time.Hour, giveBack(got[1])))
		f.requireKey(ka, []string{js[3].ID}, 1, 2)
		f.requireKeyOrder(ka, kb)
	})

	// A job unique while queued gives its claim up when it starts, chained
	// or not; chained and then given back it is queued again (parked) and
	// takes the claim back, so a twin inserted then resolves to it.
	t.Run("UnchainedQueuedScopeReclaims", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		u := uniqueKey(t)
		_, b, _ := f.chain(k, 10*time.Second, uniq(u, queued, existing))
		require.Empty(t, f.finish(time.Hour, giveBack(b)))
		f.requireUnchained(b.ID, parked)
		row, _ := f.insertAs(batondriver.JobDuplicate, uniqueJob(u, queued, existing))
		require.Equal(t, b.ID, row.ID, "the twin resolves to the unchained job")
	})
	// A holder's link to the job chained behind it goes stale when that
	// job's own outcome comes first. The job may then run again, promoted
	// into another slot of the key and leased on its own: it is no longer
	// chained, and KeyGet counts no chain behind the first holder.
	t.Run("StaleChainLinkNotCounted", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a1, b := f.staleChainLink(k)
		require.Empty(t, b.After)
		f.requireKey(k, []string{a1.ID, b.ID}, 2, 0)
		f.requireChained(k, nil)
	})
	// A stale link stays stale: the job ahead's outcome hands its slot on,
	// or with Unchain puts back, only a job still chained behind it, not
	// one its link names that now runs on its own lease; its slot is freed
	// and promotes as if nothing were chained.
	for _, unchain := range []bool{false, true} {
		t.Run(fmt.Sprintf("StaleChainLinkNotFollowedUnchain%v", unchain), func(t *testing.T) {
			f := newJobFixture(t, newDriver)
			k := key("k")
			a1, b := f.staleChainLink(k)
			c := f.insertIn(parked, keyJob(k, 2))
			fin := outcome(a1, batondriver.JobOutcomeCompleted, "", time.Time{})
			fin.Unchain = unchain
			require.Empty(t, f.finish(time.Hour, fin))
			g := f.get(b.ID)
			require.Equal(t, running, g.State, "b runs on under its own lease")
			require.Equal(t, b.Lease, g.Lease)
			require.Equal(t, b.LeaseUntil, g.LeaseUntil)
			f.requireKey(k, []string{b.ID, c.ID}, 1, 0)
			f.requireState(available, c.ID)
			f.countsOf(map[batondriver.JobState]int{running: 1, available: 1, completed: 2})
		})
	}
	// A chained job put back runs no more: it leaves the running jobs, as
	// the counts show, whichever way it goes back.
	after := map[string]map[batondriver.JobState]int{
		"Unchain":         {completed: 1, available: 1, parked: 1},
		"GiveBackChained": {running: 1, parked: 2},
		"GiveBackAhead":   {available: 1, parked: 2},
		"AheadExpired":    {scheduled: 1, available: 1, parked: 1},
	}
	for _, way := range putBackWays {
		t.Run("UnchainedNotCountedRunning"+way, func(t *testing.T) {
			f := newJobFixture(t, newDriver)
			a, b, _ := f.chain(key("k"), chainTTL(way))
			f.countsOf(map[batondriver.JobState]int{running: 2, parked: 1})
			f.putBack(way, a, b)
			f.countsOf(after[way])
		})
	}
	// A holder given back at its key's limit keeps its slot throughout: it
	// is never parked, so it shows no time parked.
	t.Run("GivenBackAtTheLimitNeverParked", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("g")
		r := f.hold(k, 1, time.Minute)
		p := f.insertIn(parked, keyJob(k, 1))
		require.Empty(t, f.finish(0, giveBack(r)))
		g := f.get(r.ID)
		require.Equal(t, available, g.State)
		require.True(t, g.ParkedAt.IsZero(), "a job given back at its key's limit parked at %v", g.ParkedAt)
		f.requireKey(k, []string{r.ID}, 0, 1)
		f.requireState(parked, p.ID)
	})
	// A lowered limit demotes only the holders beyond it: the others stay
	// where they are in the fetch order, never parked.
	t.Run("LowerLimitKeepsTheRestInPlace", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		js := f.insertRes(keyJob(k, 3), keyJob(k, 3), keyJob(k, 3), newJob()).Jobs
		a, x := js[0], js[3]
		f.setLimit(k, 1)
		f.requireKey(k, []string{a.ID}, 0, 2)
		require.True(t, f.get(a.ID).ParkedAt.IsZero(), "the holder kept was parked")
		require.Equal(t, []string{a.ID, x.ID}, ids(f.fetch(10).Jobs), "the holder kept its place before x")
	})
	// A lowered limit's demotions count as parked jobs in KeyList's order.
	t.Run("KeyListOrderFollowsDemotions", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		ka, kb := key("a"), key("b")
		js := f.insert(keyJob(kb, 1), keyJob(kb, 1), keyJob(kb, 1), keyJob(ka, 3), keyJob(ka, 3), keyJob(ka, 3))
		f.requireKeyOrder(kb, ka) // b two parked, a none
		f.setLimit(ka, 1)
		f.requireKey(ka, []string{js[3].ID}, 0, 2)
		f.requireKeyOrder(ka, kb) // two parked each: by name
	})
	// A parked job at the head of its key's queue, waiting under its own
	// default, holds back the jobs behind it (nobody jumps the queue);
	// deleted, it lets the next one take a slot free under that one's
	// default at once.
	t.Run("DeletedParkedHeadPromotes", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a := f.insertIn(available, keyJob(k, 1))
		c := f.insertIn(parked, keyJob(k, 1))
		d := f.insertIn(parked, keyJob(k, 3)) // 1 holder < 3, but c waits before it
		require.NoError(t, f.del(c.ID))
		f.requireKey(k, []string{a.ID, d.ID}, 0, 0)
		f.requireState(available, d.ID)
	})
	// Every transition that makes a job available wakes a fetcher, not
	// only inserts, fetches and finishes.
	t.Run("RaisedLimitWakes", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		f.hold(k, 1, 10*time.Second)
		p := f.insertIn(parked, keyJob(k, 1))
		f.requireWakes("a raised limit's promotion", func() { f.setLimit(k, 2) })
		f.requireState(available, p.ID)
	})
	t.Run("AdminRetryWakes", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		r := f.insertOne(newJob())
		f.done(f.fetchOne(10*time.Second), batondriver.JobOutcomeDead, time.Time{})
		f.requireWakes("an admin retry", func() {
			_, err := f.retry(r.ID)
			require.NoError(t, err)
		})
		f.requireState(available, r.ID)
	})
	t.Run("DeletedHolderWakes", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		h := f.insertIn(available, keyJob(k, 1))
		p := f.insertIn(parked, keyJob(k, 1))
		f.requireWakes("a deleted holder's promotion", func() { require.NoError(t, f.del(h.ID)) })
		f.requireState(available, p.ID)
	})
	// Again of a job unique while queued yields to a queued twin, which is
	// the next run; a twin of another scope that holds the key while it
	// runs is not queued, so the job runs again.
	t.Run("AgainQueuedOverRunningTwin", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		u := uniqueKey(t)
		a := f.insertIn(available, uniqueJob(u, queued, existing))
		ra := f.fetchOne(10 * time.Second) // gives its claim up
		require.Equal(t, a.ID, ra.ID)
		b, _ := f.insertAs(batondriver.JobInserted, uniqueJob(u, untilDone, existing))
		require.Equal(t, b.ID, f.fetchOne(10*time.Second).ID) // runs, holding its claim
		f.done(ra, batondriver.JobOutcomeAgain, time.Time{})
		g := f.get(a.ID)
		require.Equal(t, available, g.State, "a running twin is not the next run")
		require.Equal(t, 1, g.Runs)
		require.Zero(t, g.Attempt)
	})
	// A chained job given back goes back to the head of its key's parked
	// jobs as parked when it was first parked: its ParkedAt is unchanged,
	// and JobList, which lists parked jobs by ParkedAt, lists it before
	// the jobs parked after it.
	t.Run("UnchainedKeepsParkedAt", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		js := f.insertRes(keyJob(k, 1), keyJob(k, 1)).Jobs
		time.Sleep(5 * time.Millisecond) // parked after b, not in the same ms
		c := f.insertIn(parked, keyJob(k, 1))
		got := f.fetchChain(1, 10*time.Second).Jobs
		require.Equal(t, ids(js), ids(got), "the holder, then the job chained behind it")
		b := got[1]
		at := f.get(b.ID).ParkedAt
		require.False(t, at.IsZero())
		require.Equal(t, []string{c.ID}, ids(f.list(parked, 0, 0).Jobs))
		time.Sleep(20 * time.Millisecond) // a give-back time apart from the parking's
		require.Empty(t, f.finish(time.Hour, giveBack(b)))
		g := f.requireUnchained(b.ID, parked)
		require.Equal(t, at, g.ParkedAt, "ParkedAt of the unchained job")
		require.Equal(t, at, f.keyGet(k).OldestParked)
		require.Equal(t, []string{b.ID, c.ID}, ids(f.list(parked, 0, 0).Jobs), "parked jobs by ParkedAt")
	})
	// A job whose lease expired, recovered with no RecoverDelay, is
	// available at once: its RunAt is when it was taken back, after its
	// lease ended, not its first RunAt.
	t.Run("RecoveredAtOnceRunsAtRecovery", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		r := f.insertOne(newJob())
		got := f.fetchOne(50 * time.Millisecond)
		require.Equal(t, r.ID, got.ID)
		f.recover(batondriver.JobFetchParams{LeaseTTL: 10 * time.Second})
		g := f.get(r.ID)
		require.Equal(t, available, g.State)
		require.False(t, g.RunAt.Before(got.LeaseUntil),
			"RunAt %v of a job taken back before its lease ended at %v", g.RunAt, got.LeaseUntil)
	})
	// A finish that fetches wakes a fetcher for a job it made available
	// and did not lease: here the parked job its outcome promoted, while
	// it leased a job that was available before.
	t.Run("FinishFetchWakesForPromotedLeftAvailable", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		h := f.hold(k, 1, 10*time.Second)
		p := f.insertIn(parked, keyJob(k, 1))
		x := f.insertOne(newJob())
		f.requireWakes("a job promoted by a finish that fetched", func() {
			res, err := f.d.JobFinish(f.ctx, &batondriver.JobFinishParams{Queue: f.queue, Retention: time.Hour,
				Finished: []*batondriver.JobFinish{outcome(h, batondriver.JobOutcomeCompleted, "", time.Time{})},
				Fetch:    &batondriver.JobFinishFetch{Max: 1, LeaseTTL: 10 * time.Second}})
			require.NoError(t, err)
			require.Empty(t, res.Stale)
			require.Equal(t, []string{x.ID}, ids(res.Jobs))
		})
		f.requireState(available, p.ID)
	})

	// A job given back is available again from the moment it is given
	// back: its RunAt is then, not its first RunAt.
	t.Run("GivenBackRunsAtGiveBack", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		r := f.insertOne(newJob())
		got := f.fetchOne(10 * time.Second)
		require.Equal(t, r.ID, got.ID)
		time.Sleep(20 * time.Millisecond) // a give-back time apart from the insert's
		require.Empty(t, f.finish(time.Hour, giveBack(got)))
		g := f.get(r.ID)
		require.Equal(t, available, g.State)
		require.True(t, g.RunAt.After(got.AttemptedAt),
			"RunAt %v of a job given back after its lease began at %v", g.RunAt, got.AttemptedAt)
	})

	// A finish that fetches pops the available jobs it may lease; those it
	// puts back, because jobs it promoted were more urgent, go back to the
	// head of their priority in the order they had.
	t.Run("FinishFetchPutsBackPoppedInOrder", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		h1 := f.hold(k, 2, 10*time.Second, prio(5))
		h2 := f.hold(k, 2, 10*time.Second, prio(5))
		p1 := f.insertIn(parked, keyJob(k, 2, prio(0)))
		p2 := f.insertIn(parked, keyJob(k, 2, prio(0)))
		x := f.insertIn(available, withJob(prio(4)))
		y := f.insertIn(available, withJob(prio(4)))
		res, err := f.d.JobFinish(f.ctx, &batondriver.JobFinishParams{Queue: f.queue, Retention: time.Hour,
			Finished: []*batondriver.JobFinish{outcome(h1, batondriver.JobOutcomeCompleted, "", time.Time{}),
				outcome(h2, batondriver.JobOutcomeCompleted, "", time.Time{})},
			Fetch: &batondriver.JobFinishFetch{Max: 2, LeaseTTL: time.Minute}})
		require.NoError(t, err)
		require.Empty(t, res.Stale)
		require.Equal(t, []string{p1.ID, p2.ID}, ids(res.Jobs), "the promoted jobs, more urgent, leased")
		require.Equal(t, []string{x.ID, y.ID}, ids(f.list(available, 10, 0).Jobs), "the rest in their order")
		require.Equal(t, []string{x.ID, y.ID}, ids(f.fetch(10).Jobs))
	})

	// A fetch that takes its Max reports More while any priority holds
	// jobs, not only the least urgent it looked at: here that one is
	// empty, its only job deleted.
	t.Run("FetchMoreSeesEveryPriority", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.insert(withJob(prio(0)), withJob(prio(0)))
		gone := f.insertOne(withJob(prio(5)))
		require.NoError(t, f.del(gone.ID))
		res := f.fetch(1)
		require.Len(t, res.Jobs, 1)
		require.True(t, res.More, "a job of priority 0 is left")
		res = f.fetch(1)
		require.Len(t, res.Jobs, 1)
		require.False(t, res.More)
	})

	// OldestAvailable is the RunAt of the first job of a priority, which
	// has waited longest, not of the last.
	t.Run("QueueStatsOldestIsFirstOfItsPriority", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		first := f.insertOne(newJob())
		time.Sleep(20 * time.Millisecond) // a RunAt apart from the first's
		f.insertOne(newJob())
		requireNear(t, first.RunAt, f.stats().OldestAvailable, storeSlack)
	})

	// JobList pages available jobs across priorities: a page may start
	// inside one priority's jobs and end in another's, or end just where a
	// priority's jobs do.
	t.Run("ListPagesAcrossPriorities", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		all := ids(f.insert(withJob(prio(0)), withJob(prio(0)), withJob(prio(3)), withJob(prio(3)),
			withJob(prio(7)), withJob(prio(7))))
		for _, c := range []struct {
			limit, offset int
			want          []string
		}{
			{2, 0, all[:2]}, {3, 0, all[:3]}, {3, 3, all[3:]}, {2, 1, all[1:3]}, {2, 3, all[3:5]},
			{1, 5, all[5:]}, {4, 2, all[2:]}, {10, 6, []string{}},
		} {
			res := f.list(available, c.limit, c.offset)
			require.Equal(t, c.want, ids(res.Jobs), "limit %d offset %d", c.limit, c.offset)
			require.Equal(t, 6, res.Total)
		}
	})
}
