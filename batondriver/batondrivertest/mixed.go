package batondrivertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
)

// chainWays name the calls that chain a key's parked head behind a job of
// the key (see mixedChain).
var chainWays = []string{"Fetch", "FinishFetch", "HandOver"}

// mixedChain inserts jobs of key k, one per default limit in defs, the
// first two of default 1, and chains the second behind the first by way:
//
//   - Fetch: the first, available, leased by a fetch with chains;
//   - FinishFetch: leased by the finish, with chains and a fetch, of an
//     unkeyed job inserted before them;
//   - HandOver: a job of default 1 inserted before them runs with the
//     first chained behind it; the finish of that job, with chains, hands
//     its slot to the first.
//
// The others wait behind the second: the key's parked jobs, in order, as
// the call finds them. Wake tokens are drained before the call. It returns
// the key's jobs in order, and the jobs the call leased or chained.
func (f *jobFixture) mixedChain(k, way string, defs ...int) (js, got []*batondriver.JobRow) {
	f.t.Helper()
	require.GreaterOrEqual(f.t, len(defs), 2)
	require.Equal(f.t, []int{1, 1}, defs[:2], "the first two jobs' defaults")
	var pre *batondriver.JobRow // run by the call's finish
	switch way {
	case "FinishFetch":
		pre = f.insertOne(newJob())
	case "HandOver":
		pre = f.insertIn(available, keyJob(k, 1))
	}
	var ins []*batondriver.JobInsert
	for _, d := range defs {
		ins = append(ins, keyJob(k, d))
	}
	js = f.insertRes(ins...).Jobs
	first := available // the first job's state: parked behind pre's key slot
	if way == "HandOver" {
		first = parked
	}
	require.Equal(f.t, first, js[0].State)
	for i, j := range js[1:] {
		require.Equal(f.t, parked, j.State, "job %d waits", i+1)
	}
	switch way {
	case "Fetch":
		f.drainWakes()
		res := f.fetchChain(1, time.Minute)
		got = res.Jobs
	case "FinishFetch":
		held := f.fetch(1).Jobs
		require.Equal(f.t, []string{pre.ID}, ids(held), "the unkeyed job, inserted first")
		f.drainWakes()
		got = f.finishChain(&batondriver.JobFinishFetch{Max: 1, LeaseTTL: time.Minute},
			outcome(held[0], batondriver.JobOutcomeCompleted, "", time.Time{}))
	case "HandOver":
		res := f.fetchChain(1, time.Minute).Jobs
		require.Equal(f.t, []string{pre.ID, js[0].ID}, ids(res), "the first job chained behind the one before it")
		f.drainWakes()
		chained := f.finishChain(nil, outcome(res[0], batondriver.JobOutcomeCompleted, "", time.Time{}))
		got = append([]*batondriver.JobRow{f.get(js[0].ID)}, chained...)
	default:
		f.t.Fatalf("no way %q to chain", way)
	}
	require.Equal(f.t, []string{js[0].ID, js[1].ID}, ids(got), "the first job runs, the second chained behind it")
	require.Equal(f.t, running, got[0].State)
	require.Empty(f.t, f.get(js[0].ID).After, "the first job holds the key's slot")
	require.Equal(f.t, js[0].ID, got[1].After)
	return js, got
}

// exerciseMixedDefaults checks chained leases on a key whose jobs carry
// different default limits (docs/concurrency.md, "With mixed defaults"):
// a job is chained, and the jobs behind it promoted, each under the key's
// override, else its own default; the parked jobs keep their order; a
// chain that leaves at the head a job its own default admits beside the
// holders promotes it in the same step, and wakes one fetcher per job so
// promoted. Run in exerciseChains.
func exerciseMixedDefaults(t *testing.T, newDriver func(t *testing.T) batondriver.JobDriver) {
	// A chain promotes every head that its own default admits, one after
	// the other, and stops at the first it does not: r, of default 1,
	// waits, and s behind it too, though its own 5 has room (nobody jumps
	// the queue). One wake per job promoted, whichever call chained. Then
	// r and s are promoted in their order once the key is free.
	for _, way := range chainWays {
		t.Run("MixedDefaultsChainPromotesEveryHeadAdmittedBy"+way, func(t *testing.T) {
			f := newJobFixture(t, newDriver)
			k := key("k")
			js, got := f.mixedChain(k, way, 1, 1, 3, 3, 1, 5)
			a, b, p, q, r, s := got[0], got[1], js[2], js[3], js[4], js[5]
			f.requireState(available, p.ID, q.ID)
			f.requireState(parked, r.ID, s.ID)
			f.requireKey(k, []string{a.ID, p.ID, q.ID}, 1, 2)
			f.requireChained(k, map[string]string{a.ID: b.ID})
			require.Equal(t, 2, f.takeWakes(), "one wake per job the chain promoted")
			require.Equal(t, []string{p.ID, q.ID}, ids(f.list(available, 10, 0).Jobs), "promoted in their order")
			// The holders of default 3 leave: r's 1 is still full (a).
			f.complete(f.fetchOne(time.Minute))
			f.complete(f.fetchOne(time.Minute))
			f.requireState(parked, r.ID, s.ID)
			// a hands its slot to b, which then frees it: r first, then s.
			f.complete(a)
			f.requireKey(k, []string{b.ID}, 1, 2)
			f.complete(f.get(b.ID))
			require.Equal(t, []string{r.ID, s.ID}, ids(f.list(available, 10, 0).Jobs))
			f.requireKey(k, []string{r.ID, s.ID}, 0, 0)
		})
	}

	// A chain that leaves at the head a job of a smaller default than the
	// holders promotes nothing, nor does a later chain of the same call
	// take it: c, of default 1, is neither chained behind y or z (3
	// holders > 1) nor promoted, and d behind it waits too. No wake.
	t.Run("MixedDefaultsChainLeavesSmallerHeadParked", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		js := f.insertRes(keyJob(k, 3), keyJob(k, 3), keyJob(k, 3), keyJob(k, 3), keyJob(k, 1), keyJob(k, 5)).Jobs
		x, y, z, b, c, d := js[0], js[1], js[2], js[3], js[4], js[5]
		f.requireState(parked, b.ID, c.ID, d.ID)
		f.drainWakes()
		res := f.fetchChain(3, time.Minute)
		require.Equal(t, []string{x.ID, y.ID, z.ID, b.ID}, ids(res.Jobs), "b chained behind x, nothing behind y and z")
		require.False(t, res.More)
		f.requireKey(k, []string{x.ID, y.ID, z.ID}, 3, 2)
		f.requireChained(k, map[string]string{x.ID: b.ID})
		require.Zero(t, f.takeWakes())
		// y and z leave: 1 holder, c's limit of 1 still full.
		f.complete(res.Jobs[1])
		f.complete(res.Jobs[2])
		f.requireState(parked, c.ID, d.ID)
		// x hands its slot to b; b's outcome frees it: c, then d.
		f.complete(res.Jobs[0])
		f.complete(f.get(b.ID))
		require.Equal(t, []string{c.ID, d.ID}, ids(f.list(available, 10, 0).Jobs))
	})

	// An override is every job's limit: the chain asks it, not the jobs'
	// defaults. Under an override of 1, p's own 3 would admit it beside a,
	// but the chain promotes nothing; removing the override promotes it at
	// once. Under an override of 2, a job of default 1 is chained behind
	// one of two holders, and jobs of default 5 are chained or wait, never
	// promoted beside them.
	t.Run("MixedDefaultsOverrideBarsHeadsDefault", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		f.setLimit(k, 1)
		js := f.insertRes(keyJob(k, 1), keyJob(k, 1), keyJob(k, 3)).Jobs
		a, b, p := js[0], js[1], js[2]
		f.drainWakes()
		res := f.fetchChain(1, time.Minute)
		require.Equal(t, []string{a.ID, b.ID}, ids(res.Jobs))
		require.False(t, res.More, "nothing promoted")
		f.requireState(parked, p.ID)
		f.requireKey(k, []string{a.ID}, 1, 1)
		require.Zero(t, f.takeWakes())
		f.resetLimit(k)
		f.requireState(available, p.ID)
		f.requireKey(k, []string{a.ID, p.ID}, 1, 0)
	})
	t.Run("MixedDefaultsOverrideDecidesChains", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		f.setLimit(k, 2)
		js := f.insertRes(keyJob(k, 1), keyJob(k, 1), keyJob(k, 1), keyJob(k, 5), keyJob(k, 5)).Jobs
		f.requireState(parked, js[2].ID, js[3].ID, js[4].ID)
		f.drainWakes()
		res := f.fetchChain(2, time.Minute)
		require.Equal(t, ids(js[:4]), ids(res.Jobs), "two holders, a job chained behind each")
		require.False(t, res.More, "nothing promoted")
		f.requireKey(k, ids(js[:2]), 2, 1)
		f.requireChained(k, map[string]string{js[0].ID: js[2].ID, js[1].ID: js[3].ID})
		f.requireState(parked, js[4].ID)
		require.Zero(t, f.takeWakes())
	})

	// Several chains asked of one call (a finish of two holders, each
	// handing its slot to the job chained behind it, which may get the
	// next one chained behind it in turn): x is chained behind c1, and p,
	// whose 4 admits it beside the two holders, promoted, holding a slot
	// from then on; y, of default 2, is not chained behind c2 (the three
	// holders exceed its limit; see also ChainPromotionEndsChains). Only
	// the promoted job wakes a fetcher, and y and q wait in their order
	// until the holders are few enough for y.
	t.Run("MixedDefaultsBatchedFinishPromotedJobHoldsSlot", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		js, res := f.handOverTwo(k, 2, 2, 2, 2, 2, 4, 2, 4)
		c1, c2, x, p, y, q := js[2], js[3], js[4], js[5], js[6], js[7]
		require.Equal(t, []string{x.ID}, ids(res), "x chained behind c1, nothing behind c2")
		require.Equal(t, c1.ID, res[0].After)
		f.requireState(available, p.ID)
		f.requireKey(k, []string{c1.ID, c2.ID, p.ID}, 2, 2)
		f.requireChained(k, map[string]string{c1.ID: x.ID})
		require.Equal(t, 1, f.takeWakes(), "one wake, for p")
		// The holders leave one by one: x takes c1's slot; y's 2 fits once
		// x alone remains, and q's 4 beside them.
		f.complete(f.get(c1.ID))
		f.complete(f.fetchOne(time.Minute)) // p
		f.requireState(parked, y.ID, q.ID)
		f.complete(f.get(c2.ID))
		require.Equal(t, []string{y.ID, q.ID}, ids(f.list(available, 10, 0).Jobs))
		f.requireKey(k, []string{x.ID, y.ID, q.ID}, 1, 0)
	})

	// A chain that promotes a job leaves it available, and a call that
	// leaves a job available chains nothing (nobody is passed over): the
	// call's later chains are not made. Here the finish of h1 and h2 hands
	// their slots to c1 and c2; x is chained behind c1, which promotes p
	// (its 4 admits it beside the two holders); y, of default 3, would fit
	// behind c2 but stays parked, so that it cannot start before p, parked
	// before it. p is next in line, one wake for it.
	t.Run("MixedDefaultsChainPromotionEndsChainsByFinish", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		js, res := f.handOverTwo(k, 2, 2, 2, 2, 2, 4, 3, 5)
		c1, c2, x, p, y, z := js[2], js[3], js[4], js[5], js[6], js[7]
		require.Equal(t, []string{x.ID}, ids(res), "x chained behind c1, nothing behind c2")
		f.requireChained(k, map[string]string{c1.ID: x.ID})
		f.requireKey(k, []string{c1.ID, c2.ID, p.ID}, 2, 2)
		f.requireState(parked, y.ID, z.ID)
		require.Equal(t, 1, f.takeWakes(), "one wake, for p")
		require.Equal(t, []string{p.ID}, ids(f.fetch(10).Jobs))
	})

	// The same across keys, by a fetch: the chain behind a, of key k,
	// promotes p, which ends the fetch's chains: nothing is chained behind
	// b, of key l, whose next job d waits. More, and one wake, for p.
	t.Run("MixedDefaultsChainPromotionEndsChainsByFetch", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k, l := key("k"), key("l")
		js := f.insertRes(keyJob(k, 1), keyJob(l, 1), keyJob(k, 1), keyJob(k, 3), keyJob(l, 1)).Jobs
		a, b, c, p, d := js[0], js[1], js[2], js[3], js[4]
		f.requireState(parked, c.ID, p.ID, d.ID)
		f.drainWakes()
		res := f.fetchChain(2, time.Minute)
		require.Equal(t, []string{a.ID, b.ID, c.ID}, ids(res.Jobs), "c chained behind a, nothing behind b")
		require.True(t, res.More, "p is available")
		f.requireChained(k, map[string]string{a.ID: c.ID})
		f.requireChained(l, nil)
		f.requireState(available, p.ID)
		f.requireState(parked, d.ID)
		require.Equal(t, 1, f.takeWakes(), "one wake, for p")
	})

	// A slot freed in a call stops its chains (a job is left available:
	// see NoChainWhileOtherJobsAvailable), with mixed defaults as with
	// one: h1's freed slot promotes x, and p, whose 4 admits it beside,
	// so nothing is chained behind c1, which took h2's slot. Two wakes.
	t.Run("MixedDefaultsBatchedFinishFreedSlotChainsNothing", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		js := f.insertRes(keyJob(k, 2), keyJob(k, 2), keyJob(k, 2), keyJob(k, 2), keyJob(k, 4)).Jobs
		h1, h2, c1, x, p := js[0], js[1], js[2], js[3], js[4]
		held := f.fetch(1).Jobs
		require.Equal(t, []string{h1.ID}, ids(held), "h1 leased without a chain")
		h1 = held[0]
		got := f.fetchChain(1, time.Minute).Jobs
		require.Equal(t, []string{h2.ID, c1.ID}, ids(got))
		f.requireState(parked, x.ID, p.ID)
		f.drainWakes()
		res := f.finishChain(nil, outcome(got[0], batondriver.JobOutcomeCompleted, "", time.Time{}),
			outcome(h1, batondriver.JobOutcomeCompleted, "", time.Time{}))
		require.Empty(t, res)
		require.Equal(t, []string{x.ID, p.ID}, ids(f.list(available, 10, 0).Jobs))
		f.requireKey(k, []string{c1.ID, x.ID, p.ID}, 1, 0)
		f.requireChained(k, nil)
		require.Equal(t, 2, f.takeWakes(), "one wake per job promoted")
	})
}

// exerciseMixedDefaultsGiveBack checks jobs given back (JobFinish.GiveBack)
// on a key whose jobs carry different default limits: a job given back
// keeps its key's slot, as if it had not been leased, unless the key's
// limit was lowered below its holders since it was leased (docs/
// concurrency.md, at Stop). Holders admitted beside it under larger
// defaults of their own lower nothing: it keeps its slot, and so never
// waits ahead of a job that was before it in its key's order. Run in
// exerciseChains.
func exerciseMixedDefaultsGiveBack(t *testing.T, newDriver func(t *testing.T) batondriver.JobDriver) {
	// h runs with c chained behind it; the chain promoted p, of default 3,
	// beside h. h given back keeps its slot beside p (available again), c
	// goes back to the head of the parked jobs, before q: h and p run, then
	// c, then q.
	t.Run("MixedDefaultsGiveBackAfterChainPromotionKeepsSlot", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		js, got := f.mixedChain(k, "Fetch", 1, 1, 3, 1)
		h, c, p, q := got[0], got[1], js[2], js[3]
		f.requireKey(k, []string{h.ID, p.ID}, 1, 1)
		require.Empty(t, f.finish(time.Hour, giveBack(h)))
		g := f.get(h.ID)
		require.Equal(t, available, g.State, "h keeps its slot")
		require.Zero(t, g.Attempt)
		f.requireUnchained(c.ID, parked)
		f.requireKey(k, []string{h.ID, p.ID}, 0, 2)
		require.ElementsMatch(t, []string{h.ID, p.ID}, ids(f.fetch(10).Jobs), "h and p run")
		require.Empty(t, f.fetch(10).Jobs, "c waits: its limit of 1 is full")
		for _, id := range []string{h.ID, p.ID} {
			f.complete(f.get(id))
		}
		f.cycle(c.ID, q.ID)
	})

	// A chained job that took over its slot and is then given back keeps
	// the slot as any holder does, though p, promoted beside it under its
	// own default of 3, makes two holders.
	t.Run("MixedDefaultsGiveBackHeirKeepsSlot", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		js, got := f.mixedChain(k, "Fetch", 1, 1, 3, 1)
		h, c, p, q := got[0], got[1], js[2], js[3]
		f.complete(h)
		f.requireKey(k, []string{c.ID, p.ID}, 1, 1)
		require.Empty(t, f.finish(time.Hour, giveBack(f.get(c.ID))))
		f.requireState(available, c.ID)
		f.requireKey(k, []string{c.ID, p.ID}, 0, 1)
		f.requireState(parked, q.ID)
	})

	// The chain promoted p (default 2) and r (default 3) beside h; p runs.
	// c, chained behind h, is given back first (to the head of the parked
	// jobs, where it was), then p: p keeps its slot beside h and r, three
	// holders though its default is 2, and does not go ahead of c, which
	// was parked before it. c runs once the key is free for its default of
	// 1.
	t.Run("MixedDefaultsGiveBackAfterUnchainKeepsOrder", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		js, got := f.mixedChain(k, "Fetch", 1, 1, 2, 3)
		h, c, p, r := got[0], got[1], js[2], js[3]
		f.requireKey(k, []string{h.ID, p.ID, r.ID}, 1, 0)
		lp := f.fetchOne(time.Minute)
		require.Equal(t, p.ID, lp.ID)
		require.Empty(t, f.finish(time.Hour, giveBack(c)))
		f.requireUnchained(c.ID, parked)
		require.Empty(t, f.finish(time.Hour, giveBack(lp)))
		f.requireState(available, p.ID)
		f.requireKey(k, []string{h.ID, p.ID, r.ID}, 1, 1)
		f.complete(h)
		require.ElementsMatch(t, []string{p.ID, r.ID}, ids(f.fetch(10).Jobs))
		f.requireState(parked, c.ID)
		f.complete(f.get(p.ID))
		f.complete(f.get(r.ID))
		f.cycle(c.ID)
	})

	// A limit lowered while the job ran still sends it to the head of the
	// parked jobs, with mixed defaults too: three jobs of default 1 run
	// under an override of 3, which is then removed; x, inserted after,
	// waits; b given back is over its own default of 1 now, so it gives
	// its slot up and waits ahead of x, and is promoted first.
	t.Run("MixedDefaultsGiveBackAfterResetWaitsAtHead", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		f.setLimit(k, 3)
		f.insertRes(keyJob(k, 1), keyJob(k, 1), keyJob(k, 1))
		got := f.fetch(3).Jobs
		require.Len(t, got, 3)
		f.resetLimit(k)
		x := f.insertIn(parked, keyJob(k, 3))
		require.Empty(t, f.finish(time.Hour, giveBack(got[1])))
		f.requireState(parked, got[1].ID)
		f.requireKey(k, []string{got[0].ID, got[2].ID}, 2, 2)
		f.complete(got[0])
		f.complete(got[2])
		require.Equal(t, []string{got[1].ID, x.ID}, ids(f.list(available, 10, 0).Jobs), "b first, then x beside it")
	})
}

// handOverTwo inserts jobs of key k with the given default limits (at
// least four), leases the first two with the next two chained behind them,
// takes the wake tokens, and completes the two holders in one finish that
// chains: it returns the jobs inserted and the jobs that finish chained.
func (f *jobFixture) handOverTwo(k string, limits ...int) (js, chained []*batondriver.JobRow) {
	f.t.Helper()
	var in []*batondriver.JobInsert
	for _, l := range limits {
		in = append(in, keyJob(k, l))
	}
	js = f.insertRes(in...).Jobs
	got := f.fetchChain(2, time.Minute).Jobs
	require.Equal(f.t, ids(js[:4]), ids(got), "two holders, each with the next job chained")
	f.drainWakes()
	return js, f.finishChain(nil, outcome(got[0], batondriver.JobOutcomeCompleted, "", time.Time{}),
		outcome(got[1], batondriver.JobOutcomeCompleted, "", time.Time{}))
}
