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

// Short names for the states the key tests use on every line.
const (
	scheduled = batondriver.JobStateScheduled
	parked    = batondriver.JobStateParked
	available = batondriver.JobStateAvailable
	running   = batondriver.JobStateRunning
	completed = batondriver.JobStateCompleted
	cancelled = batondriver.JobStateCancelled
	dead      = batondriver.JobStateDead
	dropped   = batondriver.JobStateDropped
)

// key returns the concurrency key name with odd bytes after it (a hash tag,
// a format verb, a separator, a multibyte rune), so that every test also
// checks the key encoding. Keys sort as their names do.
func key(name string) string { return name + "{x}%|é" }

// keyJob returns newJob with concurrency key k of default limit limit,
// changed by each set in turn.
func keyJob(k string, limit int, set ...func(j *batondriver.JobInsert)) *batondriver.JobInsert {
	j := newJob()
	j.Key, j.Limit = k, limit
	for _, s := range set {
		s(j)
	}
	return j
}

// The setters keyJob and uniqueJob take.
func onBusy(p batondriver.OnBusy) func(j *batondriver.JobInsert) {
	return func(j *batondriver.JobInsert) { j.OnBusy = p }
}

func busyDelay(d time.Duration) func(j *batondriver.JobInsert) {
	return func(j *batondriver.JobInsert) { j.OnBusy, j.BusyDelay = batondriver.OnBusyReschedule, d }
}

func runAtTime(at time.Time) func(j *batondriver.JobInsert) {
	return func(j *batondriver.JobInsert) { j.RunAt = at }
}

func prio(p int) func(j *batondriver.JobInsert) {
	return func(j *batondriver.JobInsert) { j.Priority = p }
}

func attempts(n int) func(j *batondriver.JobInsert) {
	return func(j *batondriver.JobInsert) { j.MaxAttempts = n }
}

// busyReason is the error a job dropped by its busy key records.
func busyReason(k string, holding, limit int) string {
	return fmt.Sprintf("key %q busy: %d holding, limit %d", k, holding, limit)
}

// insertRes inserts jobs and checks that the result has one entry per job
// in each of its slices, Reason set exactly for the rejected ones, and a
// row for each job not refused by its busy key.
func (f *jobFixture) insertRes(jobs ...*batondriver.JobInsert) *batondriver.JobInsertResult {
	f.t.Helper()
	res, err := f.d.JobInsert(f.ctx, &batondriver.JobInsertParams{Queue: f.queue, Jobs: jobs})
	require.NoError(f.t, err)
	require.Len(f.t, res.Jobs, len(jobs))
	require.Len(f.t, res.Status, len(jobs))
	require.Len(f.t, res.Reason, len(jobs))
	for i, st := range res.Status {
		if st == batondriver.JobRejected {
			require.NotEmpty(f.t, res.Reason[i], "job %d rejected without a reason", i)
		} else {
			require.Empty(f.t, res.Reason[i], "job %d: a reason for %s", i, st)
			require.NotNil(f.t, res.Jobs[i], "job %d: no row for %s", i, st)
		}
		if res.Jobs[i] != nil {
			require.Equal(f.t, f.queue, res.Jobs[i].Queue)
		}
	}
	return res
}

// insertIn inserts one job, requires it stored in state want, and returns
// its row.
func (f *jobFixture) insertIn(want batondriver.JobState, j *batondriver.JobInsert) *batondriver.JobRow {
	f.t.Helper()
	res := f.insertRes(j)
	require.Equal(f.t, batondriver.JobInserted, res.Status[0])
	require.Equal(f.t, want, res.Jobs[0].State, "inserted job's state")
	require.Equal(f.t, want, f.get(res.Jobs[0].ID).State, "stored job's state")
	return res.Jobs[0]
}

// hold inserts a job of key k and leases it for ttl: it holds a slot while
// it runs. Nothing else may be available in the queue.
func (f *jobFixture) hold(k string, limit int, ttl time.Duration, set ...func(j *batondriver.JobInsert)) *batondriver.JobRow {
	f.t.Helper()
	r := f.insertIn(available, keyJob(k, limit, set...))
	got := f.fetchOne(ttl)
	require.Equal(f.t, r.ID, got.ID, "the holder was not the job fetched")
	return got
}

// done records an outcome of row's attempt (completed jobs kept an hour)
// and requires it recorded.
func (f *jobFixture) done(row *batondriver.JobRow, o batondriver.JobOutcome, runAt time.Time) {
	f.t.Helper()
	require.Empty(f.t, f.finish(time.Hour, outcome(row, o, "x", runAt)), "outcome %s reported stale", o)
}

// requireState asserts the stored state of each job.
func (f *jobFixture) requireState(want batondriver.JobState, ids ...string) {
	f.t.Helper()
	for _, id := range ids {
		require.Equal(f.t, want, f.get(id).State, "state of %s", id)
	}
}

// countsOf asserts the queue's counts: want's, and 0 for every other state.
func (f *jobFixture) countsOf(want map[batondriver.JobState]int) {
	f.t.Helper()
	all := make(map[batondriver.JobState]int, len(batondriver.JobStates))
	for _, s := range batondriver.JobStates {
		all[s] = want[s]
	}
	require.Equal(f.t, all, f.stats().Counts)
}

func (f *jobFixture) keyGet(k string) *batondriver.KeyInfo {
	f.t.Helper()
	info, err := f.d.KeyGet(f.ctx, &batondriver.KeyParams{Queue: f.queue, Key: k})
	require.NoError(f.t, err)
	require.Equal(f.t, f.queue, info.Queue)
	require.Equal(f.t, k, info.Key)
	require.Len(f.t, info.Holders, info.Holding, "KeyGet lists every holder")
	require.True(f.t, slices.IsSortedFunc(info.Holders, func(a, b *batondriver.KeyHolder) int {
		return strings.Compare(a.ID, b.ID)
	}), "holders sorted by ID")
	return info
}

func (f *jobFixture) setLimit(k string, n int) *batondriver.KeyInfo {
	f.t.Helper()
	return f.changeLimit(&batondriver.KeySetLimitParams{Queue: f.queue, Key: k, Limit: n})
}

func (f *jobFixture) resetLimit(k string) *batondriver.KeyInfo {
	f.t.Helper()
	return f.changeLimit(&batondriver.KeySetLimitParams{Queue: f.queue, Key: k, Reset: true})
}

func (f *jobFixture) changeLimit(p *batondriver.KeySetLimitParams) *batondriver.KeyInfo {
	f.t.Helper()
	info, err := f.d.KeySetLimit(f.ctx, p)
	require.NoError(f.t, err)
	require.Equal(f.t, f.queue, info.Queue)
	require.Equal(f.t, p.Key, info.Key)
	require.Len(f.t, info.Holders, info.Holding, "KeySetLimit returns the holders")
	require.Equal(f.t, !p.Reset, info.Override)
	if !p.Reset {
		require.Equal(f.t, p.Limit, info.Limit)
	}
	return info
}

func (f *jobFixture) keyList(limit, offset int) *batondriver.KeyListResult {
	f.t.Helper()
	res, err := f.d.KeyList(f.ctx, &batondriver.KeyListParams{Queue: f.queue, Limit: limit, Offset: offset})
	require.NoError(f.t, err)
	for _, info := range res.Keys {
		require.Equal(f.t, f.queue, info.Queue)
		require.Empty(f.t, info.Holders, "KeyList fills in no holders")
	}
	return res
}

// keyNames lists the names of the queue's active keys, in KeyList order,
// and checks Total and the queue stats' count against them.
func (f *jobFixture) keyNames() []string {
	f.t.Helper()
	res := f.keyList(1000, 0)
	names := []string{}
	for _, info := range res.Keys {
		names = append(names, info.Key)
	}
	require.Equal(f.t, len(names), res.Total)
	require.Equal(f.t, res.Total, f.stats().Keys, "QueueStats.Keys counts the active keys")
	return names
}

// requireKey asserts key k's holders (available and running jobs, in any
// order), how many of them run, and how many jobs are parked.
func (f *jobFixture) requireKey(k string, holders []string, running, parked int) *batondriver.KeyInfo {
	f.t.Helper()
	info := f.keyGet(k)
	got := []string{}
	for _, h := range info.Holders {
		got = append(got, h.ID)
	}
	require.ElementsMatch(f.t, holders, got, "holders of %s", k)
	require.Equal(f.t, len(holders), info.Holding, "holding")
	require.Equal(f.t, running, info.Running, "running")
	require.Equal(f.t, parked, info.Parked, "parked")
	// Chained counts the holders' Next (requireChained checks which).
	next := 0
	for _, h := range info.Holders {
		if h.Next != "" {
			require.Equal(f.t, batondriver.JobStateRunning, h.State, "holder %s has a job chained behind it", h.ID)
			next++
		}
	}
	require.Equal(f.t, next, info.Chained, "chained: the holders with a Next")
	if parked == 0 {
		require.True(f.t, info.OldestParked.IsZero(), "OldestParked with nothing parked")
	} else {
		require.False(f.t, info.OldestParked.IsZero(), "no OldestParked with %d parked", parked)
	}
	return info
}

// requireIdle asserts that key k has no holder, no parked job and no
// override. The interface (ErrKeyNotFound, KeyGet) reports such a key not
// found; the implementation notes return its state, kept for its fence:
// either is accepted.
func (f *jobFixture) requireIdle(k string) {
	f.t.Helper()
	info, err := f.d.KeyGet(f.ctx, &batondriver.KeyParams{Queue: f.queue, Key: k})
	if err != nil {
		require.ErrorIs(f.t, err, batondriver.ErrKeyNotFound)
		return
	}
	require.Zero(f.t, info.Holding)
	require.Zero(f.t, info.Parked)
	require.False(f.t, info.Override)
	require.NotContains(f.t, f.keyNames(), k, "an idle key is listed")
}

// cycle completes each job of want in turn: each must be the one job a
// fetch then leases, and nothing is left available after the last. It
// checks the order in which the parked jobs of a key of limit 1 are
// promoted.
func (f *jobFixture) cycle(want ...string) {
	f.t.Helper()
	for _, id := range want {
		res := f.fetch(10)
		require.Equal(f.t, []string{id}, ids(res.Jobs), "the next job promoted")
		f.complete(res.Jobs[0])
	}
	require.Empty(f.t, f.fetch(10).Jobs)
}

func exerciseKeys(t *testing.T, newDriver func(t *testing.T) batondriver.JobDriver) {
	// A job without a key has no key settings: no limit and no policy,
	// whatever became of it (the policy is a key's: "" means wait only for
	// a keyed job).
	t.Run("KeylessJobHasNoPolicy", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		later := withJob(func(j *batondriver.JobInsert) { j.RunAt = time.Now().Add(time.Hour) })
		rows := f.insert(newJob(), later)
		got := f.fetchOne(time.Minute)
		f.done(got, batondriver.JobOutcomeRetry, time.Now().Add(time.Hour))
		r, err := f.retry(rows[1].ID)
		require.NoError(t, err)
		for i, r := range append(rows, got, f.get(rows[0].ID), f.get(rows[1].ID), r) {
			require.Empty(t, r.Key, "row %d", i)
			require.Zero(t, r.Limit, "row %d", i)
			require.Empty(t, r.OnBusy, "row %d", i)
		}
		for _, st := range []batondriver.JobState{scheduled, available} {
			for _, r := range f.list(st, 0, 0).Jobs {
				require.Empty(t, r.OnBusy, "listed %s", st)
			}
		}
	})

	t.Run("LimitOneParks", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a := f.insertIn(available, keyJob(k, 1))
		require.Equal(t, k, a.Key)
		require.Equal(t, 1, a.Limit)
		require.Equal(t, batondriver.OnBusyWait, a.OnBusy, `"" means wait`)
		require.Zero(t, a.Fence)
		require.Zero(t, a.Runs)
		require.True(t, a.ParkedAt.IsZero())

		b := f.insertIn(parked, keyJob(k, 1))
		requireNear(t, time.Now(), b.ParkedAt, clockSlack)
		requireNear(t, time.Now(), b.RunAt, clockSlack)
		require.Equal(t, batondriver.OnBusyWait, b.OnBusy)
		require.Zero(t, b.Attempt)
		c := f.insertIn(parked, keyJob(k, 1))
		f.countsOf(map[batondriver.JobState]int{available: 1, parked: 2})
		require.Equal(t, []string{b.ID, c.ID}, ids(f.list(parked, 0, 0).Jobs))

		ra := f.fetch(10).Jobs
		require.Equal(t, []string{a.ID}, ids(ra), "a parked job was fetched")
		info := f.requireKey(k, []string{a.ID}, 1, 2)
		require.Equal(t, 1, info.Limit)
		require.False(t, info.Override)
		requireNear(t, b.ParkedAt, info.OldestParked, storeSlack)

		// The finish promotes b in the same step: no fetch in between.
		time.Sleep(10 * time.Millisecond) // a promotion that set RunAt would show
		f.complete(ra[0])
		g := f.get(b.ID)
		require.Equal(t, available, g.State, "the freed slot was not passed on")
		requireNear(t, b.RunAt, g.RunAt, storeSlack, "a promoted job keeps its RunAt")
		requireNear(t, b.ParkedAt, g.ParkedAt, storeSlack, "ParkedAt is when it was last parked")
		f.requireState(parked, c.ID)
		info = f.requireKey(k, []string{b.ID}, 0, 1)
		requireNear(t, c.ParkedAt, info.OldestParked, storeSlack)
		f.countsOf(map[batondriver.JobState]int{available: 1, parked: 1, completed: 1})

		f.cycle(b.ID, c.ID)
		f.requireIdle(k)
		require.Empty(t, f.keyNames())
	})

	t.Run("LimitThreeParks", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		res := f.insertRes(keyJob(k, 3), keyJob(k, 3), keyJob(k, 3), keyJob(k, 3), keyJob(k, 3))
		js := res.Jobs
		for i, want := range []batondriver.JobState{available, available, available, parked, parked} {
			require.Equal(t, batondriver.JobInserted, res.Status[i])
			require.Equal(t, want, js[i].State, "job %d of the batch", i)
		}
		rs := f.fetch(10).Jobs
		require.Equal(t, ids(js[:3]), ids(rs))
		f.requireKey(k, ids(js[:3]), 3, 2)

		// One slot freed: exactly one job promoted.
		f.complete(rs[0])
		f.requireState(available, js[3].ID)
		f.requireState(parked, js[4].ID)
		f.requireKey(k, []string{rs[1].ID, rs[2].ID, js[3].ID}, 2, 1)

		// Two slots freed in one call: the last parked job promoted, a slot
		// left free.
		require.Empty(t, f.finish(time.Hour,
			outcome(rs[1], batondriver.JobOutcomeCompleted, "", time.Time{}),
			outcome(rs[2], batondriver.JobOutcomeCompleted, "", time.Time{})))
		f.requireState(available, js[4].ID)
		f.requireKey(k, []string{js[3].ID, js[4].ID}, 0, 0)

		x := f.insertIn(available, keyJob(k, 3))
		f.requireKey(k, []string{js[3].ID, js[4].ID, x.ID}, 0, 0)
		y := f.insertIn(parked, keyJob(k, 3))
		f.countsOf(map[batondriver.JobState]int{available: 3, parked: 1, completed: 3})
		rs = f.fetch(10).Jobs
		require.Equal(t, []string{js[3].ID, js[4].ID, x.ID}, ids(rs))
		f.complete(rs[1])
		require.Equal(t, []string{y.ID}, ids(f.fetch(10).Jobs))
	})

	t.Run("ParkedInvisibleToFetch", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a := f.insertIn(available, keyJob(k, 1))
		b := f.insertIn(parked, keyJob(k, 1, func(j *batondriver.JobInsert) { j.Priority = 0 }))
		u := f.insertOne(newJob())
		res := f.fetch(10)
		require.ElementsMatch(t, []string{a.ID, u.ID}, ids(res.Jobs), "the most urgent job is parked: not fetched")
		require.True(t, res.NextRunAt.IsZero(), "a parked job is not scheduled")
		res = f.fetch(10)
		require.Empty(t, res.Jobs)
		require.True(t, res.NextRunAt.IsZero())
		f.requireState(parked, b.ID)
		require.True(t, f.stats().OldestAvailable.IsZero(), "a parked job counted as available")
		f.countsOf(map[batondriver.JobState]int{running: 2, parked: 1})
	})

	t.Run("PromotionWakesOneFetcher", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		f.insertIn(available, keyJob(k, 1))
		w := f.waitResult(f.wait(f.ctx, 5*time.Second)) // takes the admitted job's wake
		require.NoError(t, w.err)
		require.Less(t, w.took, 2500*time.Millisecond)
		f.insertIn(parked, keyJob(k, 1))
		f.insertIn(parked, keyJob(k, 1))
		w = f.waitResult(f.wait(f.ctx, 200*time.Millisecond))
		require.NoError(t, w.err)
		require.GreaterOrEqual(t, w.took, 150*time.Millisecond, "a parked job woke a fetcher")

		a := f.fetchOne(10 * time.Second)
		const timeout = time.Second
		x, y := f.wait(f.ctx, timeout), f.wait(f.ctx, timeout)
		time.Sleep(50 * time.Millisecond) // let both wait
		f.complete(a)
		wx, wy := f.waitResult(x), f.waitResult(y)
		require.NoError(t, wx.err)
		require.NoError(t, wy.err)
		first, second := min(wx.took, wy.took), max(wx.took, wy.took)
		require.Less(t, first, timeout/2, "a promotion woke nobody")
		require.GreaterOrEqual(t, second, timeout-20*time.Millisecond, "one promotion woke two fetchers")
	})

	// A fetch that takes back an expired lease frees its slot and promotes
	// the key's next parked job: a fetch that leases it wakes nobody for
	// it, one that does not (Max 0, a pool with every worker busy) wakes
	// one fetcher. The job taken back is parked again behind it
	// (RecoverDelay 0), which wakes nobody.
	t.Run("PromotionByTakeBackWakes", func(t *testing.T) {
		for _, max := range []int{0, 1} {
			t.Run(fmt.Sprint("Max", max), func(t *testing.T) {
				f := newJobFixture(t, newDriver)
				k := key("k")
				a := f.hold(k, 1, 50*time.Millisecond)
				b := f.insertIn(parked, keyJob(k, 1))
				f.drainWakes()
				res := f.recover(batondriver.JobFetchParams{Max: max, LeaseTTL: 10 * time.Second})
				f.requireState(parked, a.ID)
				if max == 0 {
					f.requireState(available, b.ID)
					require.Equal(t, 1, f.takeWakes(), "wake tokens for the job a take-back promoted")
					return
				}
				require.Equal(t, []string{b.ID}, ids(res.Jobs), "the fetch leases the job it promotes")
				require.Zero(t, f.takeWakes(), "the job a fetch promoted and leased woke a fetcher")
			})
		}
	})

	t.Run("NoQueueJumping", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a := f.insertIn(available, keyJob(k, 1))
		b := f.insertIn(parked, keyJob(k, 1))
		// c's own limit has room, but b waits before it.
		c := f.insertIn(parked, keyJob(k, 5))
		require.Equal(t, 5, f.keyGet(k).Limit, "the default limit of the key's latest parked job")
		d := f.insertIn(dropped, keyJob(k, 5, onBusy(batondriver.OnBusyDrop)))
		require.Equal(t, busyReason(k, 1, 5), d.Errors[0].Error)
		res := f.insertRes(keyJob(k, 5, onBusy(batondriver.OnBusyFail)))
		require.Equal(t, batondriver.JobRejected, res.Status[0])
		e := f.insertIn(scheduled, keyJob(k, 5, busyDelay(time.Hour)))
		requireNear(t, time.Now().Add(time.Hour), e.RunAt, clockSlack)
		f.requireKey(k, []string{a.ID}, 0, 2)

		// a's slot goes to b, which fills its limit of 1; c's limit of 5
		// has room for it behind b.
		require.NoError(t, f.del(a.ID))
		f.requireState(available, b.ID, c.ID)
		f.requireKey(k, []string{b.ID, c.ID}, 0, 0)
	})

	// The reason names the key quoted as Go quotes it (%q), whatever bytes
	// it has: escapes for quotes, backslashes, control bytes, invalid
	// UTF-8 and common invisible runes, printable runes as they are.
	t.Run("OnBusyDropReasonQuotesKey", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		for i, k := range []string{"tab\t nl\n cr\r \"q\" back\\slash \x00\x01\x1f\x7f \a\b\f\v",
			"bad utf-8 \xff\xc3 \xe2\x82 \xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf",
			"é€😀 nbsp\u00a0 c1\u0085 shy\u00ad zwsp\u200b ls\u2028 bom\ufeff pua\ue000 fffd\ufffd"} {
			a := f.insertIn(available, keyJob(k, 1))
			d := f.insertIn(dropped, keyJob(k, 1, onBusy(batondriver.OnBusyDrop)))
			require.Len(t, d.Errors, 1)
			require.Equal(t, busyReason(k, 1, 1), d.Errors[0].Error, "key %d", i)
			require.Equal(t, busyReason(k, 1, 1), f.get(d.ID).Errors[0].Error, "key %d", i)
			require.NoError(t, f.del(a.ID))
		}
	})

	t.Run("OnBusyDropAtInsert", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a := f.insertIn(available, keyJob(k, 1))
		d := f.insertIn(dropped, keyJob(k, 1, onBusy(batondriver.OnBusyDrop)))
		requireNear(t, time.Now(), d.FinishedAt, clockSlack)
		require.Equal(t, batondriver.OnBusyDrop, d.OnBusy)
		require.Zero(t, d.Attempt)
		require.True(t, d.ParkedAt.IsZero())
		require.Len(t, d.Errors, 1)
		require.Equal(t, 0, d.Errors[0].Attempt)
		require.Equal(t, busyReason(k, 1, 1), d.Errors[0].Error)
		requireNear(t, time.Now(), d.Errors[0].At, clockSlack)
		g := f.get(d.ID)
		require.Equal(t, d.Errors, g.Errors)
		requireNear(t, d.FinishedAt, g.FinishedAt, storeSlack)

		f.requireKey(k, []string{a.ID}, 0, 0)
		f.countsOf(map[batondriver.JobState]int{available: 1, dropped: 1})
		require.EqualValues(t, 1, f.stats().Dropped)
		require.Equal(t, []string{d.ID}, ids(f.list(dropped, 0, 0).Jobs))
		rs := f.fetch(10).Jobs
		require.Equal(t, []string{a.ID}, ids(rs), "a dropped job was fetched")

		// A Drop job whose key is free is admitted, and waits from then on.
		f.complete(rs[0])
		e := f.insertIn(available, keyJob(k, 1, onBusy(batondriver.OnBusyDrop)))
		require.Equal(t, batondriver.OnBusyWait, e.OnBusy, "an admitted job's later admissions wait")
		require.Equal(t, batondriver.OnBusyWait, f.get(e.ID).OnBusy)
		require.EqualValues(t, 1, f.stats().Dropped)
	})

	t.Run("OnBusyRescheduleAtInsert", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a := f.hold(k, 1, 10*time.Second)
		r := f.insertIn(scheduled, keyJob(k, 1, busyDelay(time.Hour)))
		requireNear(t, time.Now().Add(time.Hour), r.RunAt, clockSlack)
		require.Zero(t, r.Attempt)
		require.Equal(t, batondriver.OnBusyReschedule, r.OnBusy)
		res := f.fetch(10)
		require.Empty(t, res.Jobs)
		requireNear(t, r.RunAt, res.NextRunAt, storeSlack)
		f.requireKey(k, []string{a.ID}, 1, 0)

		// Due while the key is still busy: scheduled again.
		s := f.insertIn(scheduled, keyJob(k, 1, busyDelay(50*time.Millisecond)))
		f.eventually("rescheduled again when due", func() bool {
			require.Empty(t, f.fetch(10).Jobs, "a rescheduled job was fetched while its key was busy")
			return f.get(s.ID).RunAt.After(s.RunAt.Add(25 * time.Millisecond))
		})
		g := f.get(s.ID)
		require.Equal(t, scheduled, g.State)
		require.Zero(t, g.Attempt, "a reschedule counted an attempt")
		require.Equal(t, batondriver.OnBusyReschedule, g.OnBusy)
		require.Empty(t, g.Errors)
		f.requireKey(k, []string{a.ID}, 1, 0)
		require.EqualValues(t, 0, f.stats().Dropped)

		// Due with the key free: admitted.
		f.complete(a)
		var got *batondriver.JobRow
		f.eventually("admitted when due", func() bool {
			rs := f.fetch(10).Jobs
			if len(rs) == 0 {
				return false
			}
			require.Len(t, rs, 1)
			got = rs[0]
			return true
		})
		require.Equal(t, s.ID, got.ID)
		require.Equal(t, 1, got.Attempt)
		require.Equal(t, batondriver.OnBusyWait, got.OnBusy)
		f.requireState(scheduled, r.ID)
	})

	t.Run("OnBusyFailAtInsert", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a := f.insertIn(available, keyJob(k, 1))
		res := f.insertRes(keyJob(k, 1, onBusy(batondriver.OnBusyFail)), newJob(), keyJob(k, 3, onBusy(batondriver.OnBusyFail)))
		require.Equal(t, []batondriver.JobInsertStatus{batondriver.JobRejected, batondriver.JobInserted, batondriver.JobInserted}, res.Status)
		require.Nil(t, res.Jobs[0])
		require.Equal(t, "key busy", res.Reason[0])
		require.Equal(t, available, res.Jobs[1].State, "a refused job does not fail its batch")
		require.Equal(t, available, res.Jobs[2].State, "limit 3 had room")
		require.Equal(t, batondriver.OnBusyWait, res.Jobs[2].OnBusy)
		f.countsOf(map[batondriver.JobState]int{available: 3})
		f.requireKey(k, []string{a.ID, res.Jobs[2].ID}, 0, 0)
		require.EqualValues(t, 0, f.stats().Dropped, "a refused insert is not a drop")
	})

	t.Run("DelayedJobMeetsBusyKeyWhenDue", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a := f.hold(k, 1, 10*time.Second)
		at := time.Now().Add(100 * time.Millisecond)
		res := f.insertRes(
			keyJob(k, 1, runAtTime(at)),
			keyJob(k, 1, runAtTime(at), onBusy(batondriver.OnBusyDrop)),
			keyJob(k, 1, runAtTime(at), onBusy(batondriver.OnBusyFail)),
			keyJob(k, 1, runAtTime(at), busyDelay(time.Hour)),
		)
		js := res.Jobs
		for i, p := range []batondriver.OnBusy{batondriver.OnBusyWait, batondriver.OnBusyDrop, batondriver.OnBusyFail, batondriver.OnBusyReschedule} {
			require.Equal(t, batondriver.JobInserted, res.Status[i])
			require.Equal(t, scheduled, js[i].State)
			require.Equal(t, p, js[i].OnBusy, "a scheduled job keeps its policy")
		}
		f.eventually("delayed jobs due", func() bool {
			require.Empty(t, f.fetch(10).Jobs, "a job of a busy key was fetched")
			return f.get(js[0].ID).State != scheduled
		})
		g := f.get(js[0].ID)
		require.Equal(t, parked, g.State)
		require.Equal(t, batondriver.OnBusyWait, g.OnBusy)
		requireNear(t, at, g.RunAt, storeSlack, "RunAt stays the due RunAt")
		requireNear(t, time.Now(), g.ParkedAt, clockSlack)
		for _, id := range []string{js[1].ID, js[2].ID} {
			g := f.get(id)
			require.Equal(t, dropped, g.State, "a Drop or Fail job that finds its key busy when due is dropped")
			require.Len(t, g.Errors, 1)
			require.Equal(t, busyReason(k, 1, 1), g.Errors[0].Error)
			require.Equal(t, 0, g.Errors[0].Attempt)
			requireNear(t, time.Now(), g.FinishedAt, clockSlack)
		}
		g = f.get(js[3].ID)
		require.Equal(t, scheduled, g.State)
		requireNear(t, time.Now().Add(time.Hour), g.RunAt, clockSlack)
		require.Zero(t, g.Attempt)
		f.countsOf(map[batondriver.JobState]int{running: 1, parked: 1, dropped: 2, scheduled: 1})
		require.EqualValues(t, 2, f.stats().Dropped)
		f.requireKey(k, []string{a.ID}, 1, 1)

		f.complete(a)
		f.requireState(available, js[0].ID)
		f.cycle(js[0].ID)

		// Due with the key free: a Fail job is admitted.
		b := f.insertIn(scheduled, keyJob(k, 1, runAtTime(time.Now().Add(100*time.Millisecond)), onBusy(batondriver.OnBusyFail)))
		f.eventually("admitted when due", func() bool {
			f.fetch(1)
			return f.get(b.ID).State == running
		})
	})

	readmissions := []struct {
		name  string
		ttl   time.Duration
		leave func(f *jobFixture, a *batondriver.JobRow)
	}{
		{"Retry", 10 * time.Second, func(f *jobFixture, a *batondriver.JobRow) {
			f.done(a, batondriver.JobOutcomeRetry, time.Time{})
		}},
		{"Snooze", 10 * time.Second, func(f *jobFixture, a *batondriver.JobRow) {
			f.done(a, batondriver.JobOutcomeSnooze, time.Time{})
		}},
		{"Again", 10 * time.Second, func(f *jobFixture, a *batondriver.JobRow) {
			f.done(a, batondriver.JobOutcomeAgain, time.Time{})
		}},
		{"RetryDue", 10 * time.Second, func(f *jobFixture, a *batondriver.JobRow) {
			f.done(a, batondriver.JobOutcomeRetry, time.Now().Add(50*time.Millisecond))
			f.eventually("retry due", func() bool {
				f.fetch(1)
				return f.get(a.ID).State != scheduled
			})
		}},
		{"Recovered", 50 * time.Millisecond, func(f *jobFixture, a *batondriver.JobRow) {
			f.recover(batondriver.JobFetchParams{Max: 1, LeaseTTL: 10 * time.Second})
		}},
	}
	for _, c := range readmissions {
		t.Run("ReadmissionWaits"+c.name, func(t *testing.T) {
			f := newJobFixture(t, newDriver)
			k := key("k")
			for _, p := range []batondriver.OnBusy{batondriver.OnBusyDrop, batondriver.OnBusyFail} {
				k := k + string(p)
				a := f.hold(k, 1, c.ttl, onBusy(p))
				b := f.insertIn(parked, keyJob(k, 1))
				c.leave(f, a)
				g := f.get(a.ID)
				require.Equal(t, parked, g.State, "%s job admitted again behind a parked one", p)
				require.Equal(t, batondriver.OnBusyWait, g.OnBusy)
				info := f.keyGet(k)
				require.Len(t, info.Holders, 1)
				require.Equal(t, b.ID, info.Holders[0].ID, "the parked job took the freed slot")
				require.Equal(t, 1, info.Parked)
				require.EqualValues(t, 0, f.stats().Dropped)
				// a runs once b is done.
				if info.Holders[0].State == available {
					f.cycle(b.ID, a.ID)
				} else {
					f.complete(f.get(b.ID))
					f.cycle(a.ID)
				}
			}
		})
	}

	outcomes := []struct {
		name      string
		outcome   batondriver.JobOutcome
		runAt     time.Duration // from now; 0 for none
		attempts  int
		retention time.Duration
		want      batondriver.JobState // "" for deleted
	}{
		{"Completed", batondriver.JobOutcomeCompleted, 0, 3, time.Hour, completed},
		{"CompletedDeleted", batondriver.JobOutcomeCompleted, 0, 3, 0, ""},
		{"Retry", batondriver.JobOutcomeRetry, time.Hour, 3, 0, scheduled},
		{"RetryDead", batondriver.JobOutcomeRetry, time.Hour, 1, 0, dead},
		{"Snooze", batondriver.JobOutcomeSnooze, time.Hour, 3, 0, scheduled},
		{"Cancel", batondriver.JobOutcomeCancel, 0, 3, 0, cancelled},
		{"Dead", batondriver.JobOutcomeDead, 0, 3, 0, dead},
		{"Again", batondriver.JobOutcomeAgain, time.Hour, 3, 0, scheduled},
	}
	for _, c := range outcomes {
		t.Run("FinishPromotes"+c.name, func(t *testing.T) {
			f := newJobFixture(t, newDriver)
			k := key("k")
			a := f.hold(k, 1, 10*time.Second, attempts(c.attempts))
			b := f.insertIn(parked, keyJob(k, 1))
			var at time.Time
			if c.runAt != 0 {
				at = time.Now().Add(c.runAt)
			}
			require.Empty(t, f.finish(c.retention, outcome(a, c.outcome, "x", at)))
			// No fetch in between: the finish promoted b.
			f.requireState(available, b.ID)
			f.requireKey(k, []string{b.ID}, 0, 0)
			if c.want == "" {
				f.requireGone(a.ID)
			} else {
				g := f.get(a.ID)
				require.Equal(t, c.want, g.State)
				require.Equal(t, a.Fence, g.Fence, "a job keeps the fence of its last lease")
			}
			if c.outcome == batondriver.JobOutcomeAgain {
				g := f.get(a.ID)
				require.Equal(t, 1, g.Runs)
				require.Zero(t, g.Attempt)
			}
			require.Equal(t, []string{b.ID}, ids(f.fetch(10).Jobs))
		})
	}

	// A finish that leases for its caller (handoff) takes the jobs it
	// promoted in fetch order among those already available: by priority,
	// and after the available ones of the same priority, which arrived
	// first. Those it does not take wait in that order.
	for _, max := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprintf("FinishFetchTakesPromotedInOrderMax%d", max), func(t *testing.T) {
			f := newJobFixture(t, newDriver)
			k := key("k")
			h1 := f.hold(k, 2, 10*time.Second, prio(5))
			h2 := f.hold(k, 2, 10*time.Second, prio(5))
			p1 := f.insertIn(parked, keyJob(k, 2, prio(0)))
			p2 := f.insertIn(parked, keyJob(k, 2, prio(9)))
			x := f.insertIn(available, withJob(prio(4)))
			y := f.insertIn(available, withJob(prio(4)))
			res, err := f.d.JobFinish(f.ctx, &batondriver.JobFinishParams{Queue: f.queue, Retention: time.Hour,
				Finished: []*batondriver.JobFinish{outcome(h1, batondriver.JobOutcomeCompleted, "", time.Time{}),
					outcome(h2, batondriver.JobOutcomeCompleted, "", time.Time{})},
				Fetch: &batondriver.JobFinishFetch{Max: max, LeaseTTL: time.Minute}})
			require.NoError(t, err)
			require.Empty(t, res.Stale)
			order := []string{p1.ID, x.ID, y.ID, p2.ID}
			n := min(max, len(order))
			require.Equal(t, order[:n], ids(res.Jobs), "leased in fetch order")
			for _, r := range res.Jobs {
				require.Equal(t, running, f.get(r.ID).State)
			}
			require.Equal(t, order[n:], ids(f.list(available, 10, 0).Jobs), "the rest available in fetch order")
			run := 1 // p1, the most urgent
			if n == len(order) {
				run++ // and p2, the least
			}
			f.requireKey(k, []string{p1.ID, p2.ID}, run, 0)
			require.Equal(t, order[n:], ids(f.fetch(10).Jobs))
		})
	}

	t.Run("ExpiredLeaseFreesSlot", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a := f.hold(k, 1, 50*time.Millisecond)
		b := f.insertIn(parked, keyJob(k, 1))
		res := f.recover(batondriver.JobFetchParams{Max: 1, LeaseTTL: 10 * time.Second, RecoverDelay: time.Hour})
		// Taken back, then b promoted and leased, all in one fetch.
		require.Equal(t, []string{b.ID}, ids(res.Jobs), "the recovered slot went to the parked job")
		require.Greater(t, res.Jobs[0].Fence, a.Fence)
		f.requireState(scheduled, a.ID)
		f.requireKey(k, []string{b.ID}, 1, 0)

		// An expired lease without attempts left: dead, and the slot freed.
		k2 := key("k2")
		c := f.hold(k2, 1, 50*time.Millisecond, attempts(1))
		d := f.insertIn(parked, keyJob(k2, 1))
		res = f.recover(batondriver.JobFetchParams{Max: 1, LeaseTTL: 10 * time.Second})
		require.Equal(t, []string{d.ID}, ids(res.Jobs))
		f.requireState(dead, c.ID)
		f.requireKey(k2, []string{d.ID}, 1, 0)
	})

	t.Run("RaiseLimitPromotes", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a := f.hold(k, 1, 10*time.Second)
		js := f.insertRes(keyJob(k, 1), keyJob(k, 1), keyJob(k, 1)).Jobs
		b, c, d := js[0], js[1], js[2]
		f.requireKey(k, []string{a.ID}, 1, 3)

		info := f.setLimit(k, 3)
		require.Equal(t, 3, info.Holding, "raising the limit promotes at once")
		require.Equal(t, 1, info.Running)
		require.Equal(t, 1, info.Parked)
		f.requireState(available, b.ID, c.ID)
		f.requireState(parked, d.ID)
		info = f.requireKey(k, []string{a.ID, b.ID, c.ID}, 1, 1)
		require.Equal(t, 3, info.Limit)
		require.True(t, info.Override)
		require.Equal(t, 3, f.setLimit(k, 3).Holding, "setting the same limit again changes nothing")

		// Reset: the jobs' default of 1 applies; b and c, not started, wait
		// again at the head of the parked queue, in their order.
		info = f.resetLimit(k)
		require.Equal(t, 1, info.Limit)
		require.Equal(t, 1, info.Holding)
		require.Equal(t, 3, info.Parked)
		f.requireState(parked, b.ID, c.ID, d.ID)
		f.requireKey(k, []string{a.ID}, 1, 3)
		f.complete(a)
		f.cycle(b.ID, c.ID, d.ID)
	})

	t.Run("LowerLimitDemotesNewestAvailable", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		js := f.insertRes(keyJob(k, 3), keyJob(k, 3), keyJob(k, 3), keyJob(k, 3)).Jobs
		a, b, c, d := js[0], js[1], js[2], js[3]
		ra := f.fetchOne(10 * time.Second)
		require.Equal(t, a.ID, ra.ID)
		f.requireKey(k, []string{a.ID, b.ID, c.ID}, 1, 1)

		info := f.setLimit(k, 1)
		require.Equal(t, 1, info.Holding)
		require.Equal(t, 1, info.Running)
		require.Equal(t, 3, info.Parked)
		require.Equal(t, a.ID, info.Holders[0].ID)
		for _, id := range []string{b.ID, c.ID} {
			g := f.get(id)
			require.Equal(t, parked, g.State, "an available holder beyond the new limit")
			requireNear(t, time.Now(), g.ParkedAt, clockSlack)
		}
		require.Empty(t, f.fetch(10).Jobs, "a demoted job was fetched")
		f.countsOf(map[batondriver.JobState]int{running: 1, parked: 3})

		// b and c went to the head, before d, in their order.
		f.complete(ra)
		f.requireState(available, b.ID)
		f.requireState(parked, c.ID, d.ID)
		f.cycle(b.ID, c.ID, d.ID)

		// Running jobs beyond a lowered limit finish; none is promoted until
		// the key is under its limit.
		k2 := key("k2")
		rs := []*batondriver.JobRow{f.hold(k2, 3, 10*time.Second), f.hold(k2, 3, 10*time.Second), f.hold(k2, 3, 10*time.Second)}
		e := f.insertIn(parked, keyJob(k2, 3))
		info = f.setLimit(k2, 1)
		require.Equal(t, 3, info.Holding)
		require.Equal(t, 3, info.Running)
		require.Equal(t, 1, info.Parked)
		f.complete(rs[0])
		f.requireKey(k2, ids(rs[1:]), 2, 1)
		f.complete(rs[1])
		f.requireKey(k2, ids(rs[2:]), 1, 1)
		f.requireState(parked, e.ID)
		f.complete(rs[2])
		f.requireKey(k2, []string{e.ID}, 0, 0)
	})

	t.Run("LowerLimitDemotesLeastUrgentFirst", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		prio := func(p int) func(j *batondriver.JobInsert) {
			return func(j *batondriver.JobInsert) { j.Priority = p }
		}
		// x, y and z hold the key's three slots, available; w waits.
		js := f.insertRes(keyJob(k, 3, prio(0)), keyJob(k, 3, prio(5)), keyJob(k, 3, prio(0)), keyJob(k, 3, prio(0))).Jobs
		x, y, z, w := js[0], js[1], js[2], js[3]
		f.requireKey(k, []string{x.ID, y.ID, z.ID}, 0, 1)

		// Down to 1: y goes first, as the least urgent though admitted
		// before z, then z, the newest of priority 0; x stays.
		info := f.setLimit(k, 1)
		require.Equal(t, 1, info.Holding)
		require.Equal(t, 3, info.Parked)
		require.Equal(t, x.ID, info.Holders[0].ID)
		f.requireState(available, x.ID)
		f.requireState(parked, y.ID, z.ID, w.ID)

		// The demoted go to the head of the parked queue, the last demoted
		// first: z, y, then w.
		rx := f.fetchOne(10 * time.Second)
		require.Equal(t, x.ID, rx.ID)
		f.complete(rx)
		f.cycle(z.ID, y.ID, w.ID)
	})

	t.Run("ZeroHalts", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a := f.hold(k, 2, 10*time.Second)
		b := f.insertIn(available, keyJob(k, 2))
		c := f.insertIn(parked, keyJob(k, 2))

		info := f.setLimit(k, 0)
		require.Equal(t, 1, info.Holding, "a halt lets running jobs finish")
		require.Equal(t, 2, info.Parked, "a halt parks the jobs not yet started")
		require.Empty(t, f.fetch(10).Jobs)
		d := f.insertIn(parked, keyJob(k, 2))
		e := f.insertIn(dropped, keyJob(k, 2, onBusy(batondriver.OnBusyDrop)))
		require.Equal(t, busyReason(k, 1, 0), e.Errors[0].Error)
		res := f.insertRes(keyJob(k, 2, onBusy(batondriver.OnBusyFail)))
		require.Equal(t, batondriver.JobRejected, res.Status[0])

		f.complete(a)
		info = f.requireKey(k, nil, 0, 3)
		require.Equal(t, 0, info.Limit)
		require.True(t, info.Override)
		require.Empty(t, f.fetch(10).Jobs, "a halted key's job was fetched")
		require.Equal(t, []string{k}, f.keyNames(), "a halted key is active")

		// Reset: the default of the key's latest parked job applies.
		info = f.resetLimit(k)
		require.Equal(t, 2, info.Limit)
		f.requireKey(k, []string{b.ID, c.ID}, 0, 1)
		f.requireState(parked, d.ID)
		rs := f.fetch(10).Jobs
		require.Equal(t, []string{b.ID, c.ID}, ids(rs))
		f.complete(rs[0])
		f.complete(rs[1])
		require.Equal(t, []string{d.ID}, ids(f.fetch(10).Jobs))
	})

	// Nothing of an idle key is kept, so that default keys — one per
	// distinct args — cannot grow the backend without bound; its fences
	// keep rising all the same.
	t.Run("IdleKeyKeepsNothing", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		forgotten := func(why string) {
			t.Helper()
			_, err := f.d.KeyGet(f.ctx, &batondriver.KeyParams{Queue: f.queue, Key: k})
			require.ErrorIs(t, err, batondriver.ErrKeyNotFound, why)
			require.NotContains(t, f.keyNames(), k, why)
		}
		a := f.hold(k, 1, 10*time.Second)
		f.complete(a)
		forgotten("a key whose last holder finished")

		// An override keeps a key even when idle; its reset forgets it.
		f.setLimit(k, 2)
		require.Equal(t, 2, f.keyGet(k).Limit)
		f.resetLimit(k)
		forgotten("a key whose override was reset")

		// A job of a forgotten key brings its own default; fences go on.
		b := f.hold(k, 3, 10*time.Second)
		require.Greater(t, b.Fence, a.Fence, "a fence after the key was forgotten")
		info := f.keyGet(k)
		require.Equal(t, 3, info.Limit)
		require.Equal(t, b.Fence, info.Fence)
		f.complete(b)
		forgotten("a key forgotten twice")
	})

	t.Run("OverrideOfUnusedKey", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		info := f.setLimit(k, 2)
		require.Zero(t, info.Holding)
		require.Zero(t, info.Parked)
		require.Zero(t, info.Fence)
		info = f.requireKey(k, nil, 0, 0)
		require.Equal(t, 2, info.Limit)
		require.True(t, info.Override)
		require.Equal(t, []string{k}, f.keyNames(), "a key with an override is active")

		// The override wins over the jobs' default.
		js := f.insertRes(keyJob(k, 1), keyJob(k, 1), keyJob(k, 1)).Jobs
		require.Equal(t, []batondriver.JobState{available, available, parked}, []batondriver.JobState{js[0].State, js[1].State, js[2].State})
		require.Equal(t, 2, f.keyGet(k).Limit)

		// Reset: the jobs' default of 1 applies; the later admitted waits.
		info = f.resetLimit(k)
		require.Equal(t, 1, info.Limit)
		require.False(t, info.Override)
		f.requireKey(k, []string{js[0].ID}, 0, 2)
		f.cycle(js[0].ID, js[1].ID, js[2].ID)
		f.requireIdle(k)
	})

	t.Run("PerJobDefaultLimit", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a := f.insertIn(available, keyJob(k, 1))
		require.Equal(t, 1, f.keyGet(k).Limit)
		b := f.insertIn(available, keyJob(k, 3)) // 1 holder < 3
		require.Equal(t, 3, f.keyGet(k).Limit)
		c := f.insertIn(parked, keyJob(k, 1)) // 2 holders >= 1
		info := f.requireKey(k, []string{a.ID, b.ID}, 0, 1)
		require.Equal(t, 1, info.Limit, "the latest parked job's default")
		d := f.insertIn(parked, keyJob(k, 3)) // c waits before it

		// Promotion asks the head's own limit: c's 1 is still full.
		require.NoError(t, f.del(a.ID))
		f.requireKey(k, []string{b.ID}, 0, 2)
		// Now c fits, and d's 3 has room behind it.
		require.NoError(t, f.del(b.ID))
		f.requireKey(k, []string{c.ID, d.ID}, 0, 0)
	})

	t.Run("DemotedKeepTheirDefault", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a := f.insertIn(available, keyJob(k, 3))
		b := f.insertIn(available, keyJob(k, 3))
		c := f.insertIn(available, keyJob(k, 3))
		d := f.insertIn(parked, keyJob(k, 1)) // 3 holders >= 1
		require.Equal(t, 1, f.keyGet(k).Limit, "the latest parked job's default")
		// b and c go back to wait before d, each with its default of 3.
		f.setLimit(k, 1)
		f.requireKey(k, []string{a.ID}, 0, 3)
		f.requireState(parked, b.ID, c.ID, d.ID)
		// Without the override, b and c fit under their 3; d's 1 does not.
		f.resetLimit(k)
		f.requireKey(k, []string{a.ID, b.ID, c.ID}, 0, 1)
		f.requireState(parked, d.ID)
	})

	t.Run("Fences", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		floor := func() int64 { return time.Now().Add(-clockSlack).UnixMilli() * 1024 }
		ceiling := func() int64 { return time.Now().Add(clockSlack).UnixMilli()*1024 + 1024 }
		u := f.insertOne(newJob())
		js := f.insertRes(keyJob(k, 2), keyJob(k, 2)).Jobs
		low := floor()
		rs := f.fetch(10).Jobs
		require.Equal(t, []string{u.ID, js[0].ID, js[1].ID}, ids(rs))
		require.Zero(t, rs[0].Fence, "a job without a key has no fence")
		require.GreaterOrEqual(t, rs[1].Fence, low, "a fence is at least the backend's ms × 1024")
		require.Less(t, rs[1].Fence, ceiling(), "a fence is about the backend's ms × 1024")
		require.Greater(t, rs[2].Fence, rs[1].Fence, "fences of one fetch rise in fetch order")
		for _, r := range rs {
			require.Equal(t, r.Fence, f.get(r.ID).Fence)
		}
		info := f.keyGet(k)
		require.Equal(t, rs[2].Fence, info.Fence, "the highest fence of a running holder")
		for _, h := range info.Holders {
			require.Equal(t, running, h.State)
			require.Equal(t, f.get(h.ID).Fence, h.Fence)
		}

		// Strictly rising across leases, most of them in one millisecond.
		last := rs[2].Fence
		f.complete(rs[1])
		f.complete(rs[2])
		require.Equal(t, rs[1].Fence, f.get(rs[1].ID).Fence, "a finished job keeps its last fence")
		for range 20 {
			r := f.hold(k, 2, 10*time.Second)
			require.Greater(t, r.Fence, last)
			require.GreaterOrEqual(t, r.Fence, floor())
			last = r.Fence
			f.complete(r)
		}
		f.requireIdle(k)

		// Across an expired lease and a retry of the same job.
		r := f.hold(k, 2, 50*time.Millisecond)
		var again *batondriver.JobRow
		f.eventually("expired job leased again", func() bool {
			rs := f.fetch(1).Jobs
			if len(rs) == 0 {
				return false
			}
			again = rs[0]
			return true
		})
		require.Equal(t, r.ID, again.ID)
		require.Greater(t, again.Fence, r.Fence, "a new lease of the same job has a new fence")
		f.done(again, batondriver.JobOutcomeRetry, time.Time{})
		third := f.fetchOne(10 * time.Second)
		require.Equal(t, r.ID, third.ID)
		require.Greater(t, third.Fence, again.Fence)
		require.Equal(t, third.Fence, f.keyGet(k).Fence)
	})

	t.Run("KeyGet", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a := f.hold(k, 2, 10*time.Second)
		b := f.insertIn(available, keyJob(k, 2))
		c := f.insertIn(parked, keyJob(k, 2))
		f.insertIn(parked, keyJob(k, 2))
		info := f.keyGet(k)
		require.Equal(t, 2, info.Limit)
		require.False(t, info.Override)
		require.Equal(t, 2, info.Holding)
		require.Equal(t, 1, info.Running)
		require.Equal(t, 2, info.Parked)
		requireNear(t, c.ParkedAt, info.OldestParked, storeSlack)
		require.Equal(t, a.Fence, info.Fence)
		want := map[string]*batondriver.KeyHolder{
			a.ID: {ID: a.ID, State: running, Fence: a.Fence, LeaseUntil: a.LeaseUntil},
			b.ID: {ID: b.ID, State: available},
		}
		for _, h := range info.Holders {
			w := want[h.ID]
			require.NotNil(t, w, "holder %s", h.ID)
			require.Equal(t, w.State, h.State)
			require.Equal(t, w.Fence, h.Fence)
			if w.LeaseUntil.IsZero() {
				require.True(t, h.LeaseUntil.IsZero(), "an available holder has no lease")
			} else {
				requireNear(t, w.LeaseUntil, h.LeaseUntil, storeSlack)
			}
		}

		// Extending the lease shows in the holder.
		f.extend(time.Hour, lease(a))
		for _, h := range f.keyGet(k).Holders {
			if h.ID == a.ID {
				requireNear(t, time.Now().Add(time.Hour), h.LeaseUntil, clockSlack)
			}
		}

		_, err := f.d.KeyGet(f.ctx, &batondriver.KeyParams{Queue: f.queue, Key: key("unused")})
		require.ErrorIs(t, err, batondriver.ErrKeyNotFound)
		_, err = f.d.KeyGet(f.ctx, &batondriver.KeyParams{Queue: uniqueQueue(), Key: k})
		require.ErrorIs(t, err, batondriver.ErrKeyNotFound, "a key belongs to its queue")
	})

	t.Run("KeysBelongToTheirQueue", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		g := *f
		g.queue = uniqueQueue()
		k := key("k")
		a := f.insertIn(available, keyJob(k, 1))
		b := g.insertIn(available, keyJob(k, 1))
		g.setLimit(k, 0)
		f.requireKey(k, []string{a.ID}, 0, 0)
		require.False(t, f.keyGet(k).Override)
		f.insertIn(parked, keyJob(k, 1))
		g.requireKey(k, nil, 0, 1)
		g.requireState(parked, b.ID)
		require.Equal(t, []string{k}, f.keyNames())
	})

	t.Run("KeyList", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		ka, kb, kc, kd, ke := key("a"), key("b"), key("c"), key("d"), key("e")
		holders := map[string]*batondriver.JobRow{}
		for _, s := range []struct {
			k      string
			parked int
		}{{ke, 1}, {kc, 2}, {ka, 0}, {kb, 2}} {
			holders[s.k] = f.insertIn(available, keyJob(s.k, 1))
			for range s.parked {
				f.insertIn(parked, keyJob(s.k, 1))
			}
		}
		f.setLimit(kd, 4)

		// Most parked first, then by name.
		res := f.keyList(0, 0)
		require.Equal(t, 5, res.Total)
		require.Len(t, res.Keys, 5)
		for i, want := range []struct {
			k               string
			holding, parked int
			limit           int
		}{{kb, 1, 2, 1}, {kc, 1, 2, 1}, {ke, 1, 1, 1}, {ka, 1, 0, 1}, {kd, 0, 0, 4}} {
			info := res.Keys[i]
			require.Equal(t, want.k, info.Key, "key %d", i)
			require.Equal(t, want.holding, info.Holding, want.k)
			require.Zero(t, info.Running, want.k)
			require.Equal(t, want.parked, info.Parked, want.k)
			require.Equal(t, want.limit, info.Limit, want.k)
			require.Equal(t, want.k == kd, info.Override, want.k)
			require.Equal(t, want.parked == 0, info.OldestParked.IsZero(), want.k)
		}
		for _, c := range []struct {
			limit, offset int
			want          []string
		}{
			{2, 0, []string{kb, kc}}, {2, 2, []string{ke, ka}}, {2, 4, []string{kd}}, {2, 5, nil}, {3, 100, nil}, {0, 1, []string{kc, ke, ka, kd}},
		} {
			res := f.keyList(c.limit, c.offset)
			var got []string
			for _, info := range res.Keys {
				got = append(got, info.Key)
			}
			require.Equal(t, c.want, got, "limit %d offset %d", c.limit, c.offset)
			require.Equal(t, 5, res.Total)
		}
		require.Equal(t, 5, f.stats().Keys)

		// The order follows the parked counts.
		require.NoError(t, f.del(holders[ke].ID)) // promotes e's parked job
		require.Equal(t, []string{kb, kc, ka, kd, ke}, f.keyNames())
		pa := []*batondriver.JobRow{
			f.insertIn(parked, keyJob(ka, 1)),
			f.insertIn(parked, keyJob(ka, 1)),
			f.insertIn(parked, keyJob(ka, 1)),
		}
		require.Equal(t, []string{ka, kb, kc, kd, ke}, f.keyNames())
		// Deleting parked jobs lowers the count too: a has 1 left.
		require.NoError(t, f.del(pa[0].ID))
		require.NoError(t, f.del(pa[2].ID))
		require.Equal(t, []string{kb, kc, ka, kd, ke}, f.keyNames())

		// Keys that go idle leave the list.
		f.resetLimit(kd)
		require.Equal(t, []string{kb, kc, ka, ke}, f.keyNames())
		for _, r := range f.list(available, 0, 0).Jobs {
			if r.Key == ke {
				require.NoError(t, f.del(r.ID))
			}
		}
		require.Equal(t, []string{kb, kc, ka}, f.keyNames())
		f.requireIdle(ke)
		f.requireIdle(kd)

		other := *f
		other.queue = uniqueQueue()
		empty := other.keyList(0, 0)
		require.Empty(t, empty.Keys)
		require.Zero(t, empty.Total)
	})

	t.Run("KeyListDefaultLimit", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		jobs := make([]*batondriver.JobInsert, 101)
		for i := range jobs {
			jobs[i] = keyJob(key(fmt.Sprintf("k%03d", i)), 1)
		}
		f.insert(jobs...)
		res := f.keyList(0, 0)
		require.Len(t, res.Keys, 100, "Limit 0 means 100")
		require.Equal(t, 101, res.Total)
		require.Equal(t, key("k000"), res.Keys[0].Key)
		require.Equal(t, key("k099"), res.Keys[99].Key)
		require.Len(t, f.keyList(1000, 0).Keys, 101)
	})

	t.Run("ListParkedAndDropped", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		pause := func() { time.Sleep(5 * time.Millisecond) } // distinct times at millisecond precision
		k1, k2 := key("k1"), key("k2")
		f.insertIn(available, keyJob(k1, 1))
		p1 := f.insertIn(parked, keyJob(k1, 1))
		pause()
		f.insertIn(available, keyJob(k2, 1))
		p2 := f.insertIn(parked, keyJob(k2, 1))
		pause()
		p3 := f.insertIn(parked, keyJob(k1, 1))
		d1 := f.insertIn(dropped, keyJob(k2, 1, onBusy(batondriver.OnBusyDrop)))
		pause()
		d2 := f.insertIn(dropped, keyJob(k1, 1, onBusy(batondriver.OnBusyDrop)))

		res := f.list(parked, 0, 0)
		require.Equal(t, []string{p1.ID, p2.ID, p3.ID}, ids(res.Jobs), "parked jobs by ParkedAt")
		require.Equal(t, 3, res.Total)
		for _, r := range res.Jobs {
			require.False(t, r.ParkedAt.IsZero())
		}
		res = f.list(parked, 1, 1)
		require.Equal(t, []string{p2.ID}, ids(res.Jobs))
		require.Equal(t, 3, res.Total)
		res = f.list(dropped, 0, 0)
		require.Equal(t, []string{d1.ID, d2.ID}, ids(res.Jobs), "dropped jobs by FinishedAt")
		require.Equal(t, 2, res.Total)
	})

	// A key's parked jobs are listed in the order they will be promoted,
	// which after a lowered limit is not the order they were parked in:
	// the list is checked against the promotions that follow.
	t.Run("ListParkedOfKey", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		listKey := func(k string, limit, offset int) *batondriver.JobListResult {
			t.Helper()
			res, err := f.d.JobList(f.ctx, &batondriver.JobListParams{Queue: f.queue, State: parked, Key: k, Limit: limit, Offset: offset})
			require.NoError(t, err)
			return res
		}
		k1, k2 := key("k1"), key("k2")
		js := f.insertRes(keyJob(k1, 2), keyJob(k1, 2), keyJob(k2, 1), keyJob(k1, 2), keyJob(k2, 1),
			keyJob(k1, 2), keyJob(k1, 2)).Jobs
		a, b, c, d, e := js[0], js[1], js[3], js[5], js[6]

		res := listKey(k1, 0, 0)
		require.Equal(t, []string{c.ID, d.ID, e.ID}, ids(res.Jobs), "k1's parked jobs, head first")
		require.Equal(t, 3, res.Total)
		for _, r := range res.Jobs {
			require.Equal(t, parked, r.State)
			require.Equal(t, k1, r.Key)
		}
		res = listKey(k1, 1, 1)
		require.Equal(t, []string{d.ID}, ids(res.Jobs), "a page")
		require.Equal(t, 3, res.Total)
		res = listKey(k1, 10, 3)
		require.Empty(t, res.Jobs, "past the end")
		require.Equal(t, 3, res.Total)
		res = listKey(k2, 0, 0)
		require.Equal(t, []string{js[4].ID}, ids(res.Jobs), "k2's parked job")
		require.Equal(t, 1, res.Total)
		res = listKey(key("none"), 0, 0)
		require.Empty(t, res.Jobs, "a key with nothing parked")
		require.Zero(t, res.Total)

		// Lowered to 1 with a running and an available holder: the
		// available one goes back to the head, though parked last.
		ra := f.fetchOne(10 * time.Second)
		require.Equal(t, a.ID, ra.ID)
		f.setLimit(k1, 1)
		res = listKey(k1, 0, 0)
		require.Equal(t, []string{b.ID, c.ID, d.ID, e.ID}, ids(res.Jobs), "the demoted holder at the head")
		require.Equal(t, 4, res.Total)
		all := ids(f.list(parked, 0, 0).Jobs)
		require.Len(t, all, 5)
		require.Equal(t, b.ID, all[4], "the state's list orders by ParkedAt: not the order they run in")

		// They run in the order listed, each listed one fewer.
		f.complete(ra)
		for i, id := range ids(res.Jobs) {
			require.Equal(t, ids(res.Jobs)[i+1:], ids(listKey(k1, 0, 0).Jobs), "after %d promotions", i+1)
			var got *batondriver.JobRow
			for _, r := range f.fetch(10).Jobs {
				if r.Key == k1 {
					got = r
				} else {
					f.complete(r) // k2's jobs
				}
			}
			require.NotNil(t, got, "no k1 job promoted")
			require.Equal(t, id, got.ID, "promotion %d", i+1)
			f.complete(got)
		}
		res = listKey(k1, 0, 0)
		require.Empty(t, res.Jobs)
		require.Zero(t, res.Total)

		bad := func(p batondriver.JobListParams, why string) {
			t.Helper()
			p.Queue = f.queue
			_, err := f.d.JobList(f.ctx, &p)
			require.ErrorIs(t, err, batondriver.ErrBadParams, why)
		}
		bad(batondriver.JobListParams{State: available, Key: k1}, "a key with a state other than parked")
		bad(batondriver.JobListParams{State: running, Key: k1}, "a key with a state other than parked")
		bad(batondriver.JobListParams{State: parked, Key: strings.Repeat("k", batondriver.MaxKeyLen+1)}, "a key too long")
		bad(batondriver.JobListParams{State: parked, Key: k1, Limit: batondriver.MaxPage + 1}, "a page too big")
	})

	t.Run("DroppedRetention", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		f.hold(k, 1, 10*time.Second)
		d1 := f.insertIn(dropped, keyJob(k, 1, onBusy(batondriver.OnBusyDrop)))
		d2 := f.insertIn(dropped, keyJob(k, 1, onBusy(batondriver.OnBusyDrop)))
		f.fetchP(batondriver.JobFetchParams{Max: 1, LeaseTTL: time.Second}) // no retention: kept
		f.countsOf(map[batondriver.JobState]int{running: 1, dropped: 2})
		time.Sleep(60 * time.Millisecond)
		f.fetchP(batondriver.JobFetchParams{Max: 1, LeaseTTL: time.Second, DroppedRetention: time.Hour})
		f.fetchP(batondriver.JobFetchParams{Max: 1, LeaseTTL: time.Second, DeadRetention: 30 * time.Millisecond})
		f.countsOf(map[batondriver.JobState]int{running: 1, dropped: 2})
		f.fetchP(batondriver.JobFetchParams{Max: 1, LeaseTTL: time.Second, DroppedRetention: 30 * time.Millisecond})
		f.countsOf(map[batondriver.JobState]int{running: 1})
		f.requireGone(d1.ID)
		f.requireGone(d2.ID)
		require.EqualValues(t, 2, f.stats().Dropped, "the drop counter counts swept jobs too")
		require.Zero(t, f.list(dropped, 0, 0).Total)
	})

	t.Run("DeleteKeyed", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a := f.insertIn(available, keyJob(k, 1))
		b := f.insertIn(parked, keyJob(k, 1))
		c := f.insertIn(parked, keyJob(k, 1))
		d := f.insertIn(dropped, keyJob(k, 1, onBusy(batondriver.OnBusyDrop)))

		// A parked job leaves its key's queue.
		require.NoError(t, f.del(b.ID))
		f.requireGone(b.ID)
		f.requireKey(k, []string{a.ID}, 0, 1)
		require.ErrorIs(t, f.del(b.ID), batondriver.ErrJobNotFound)

		// A holder's slot goes to the next parked job in the same step.
		require.NoError(t, f.del(a.ID))
		f.requireState(available, c.ID)
		f.requireKey(k, []string{c.ID}, 0, 0)

		require.NoError(t, f.del(d.ID))
		f.requireGone(d.ID)
		r := f.fetchOne(10 * time.Second)
		require.Equal(t, c.ID, r.ID)
		require.ErrorIs(t, f.del(c.ID), batondriver.ErrBadParams, "a running job was deleted")
		f.requireKey(k, []string{c.ID}, 1, 0)
		f.countsOf(map[batondriver.JobState]int{running: 1})
		f.complete(r)
		f.requireIdle(k)
	})

	// One attempt's outcome given twice in one call is recorded once: the
	// second is stale, as it would be in a later call, even when the first
	// deleted the job at once (no retention).
	t.Run("SameOutcomeTwiceInOneCall", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a := f.hold(k, 1, 10*time.Second)
		b := f.insertIn(parked, keyJob(k, 1))
		require.Equal(t, []string{a.ID}, f.finish(0, outcome(a, batondriver.JobOutcomeCompleted, "", time.Time{}),
			outcome(a, batondriver.JobOutcomeRetry, "x", time.Time{})))
		f.requireGone(a.ID)
		f.requireKey(k, []string{b.ID}, 0, 0)
		f.countsOf(map[batondriver.JobState]int{available: 1})
		f.cycle(b.ID)
		f.requireIdle(k)
	})

	t.Run("RetryKeyed", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a := f.hold(k, 1, 10*time.Second)
		x := f.insertIn(dropped, keyJob(k, 1, onBusy(batondriver.OnBusyDrop)))
		s := f.insertIn(scheduled, keyJob(k, 1, busyDelay(time.Hour)))

		// An admin retry is no first admission: it parks whatever the policy.
		g, err := f.retry(x.ID)
		require.NoError(t, err)
		require.Equal(t, parked, g.State, "a retried dropped job with its key busy")
		require.Zero(t, g.Attempt)
		require.True(t, g.FinishedAt.IsZero())
		requireNear(t, time.Now(), g.ParkedAt, clockSlack)
		g, err = f.retry(s.ID)
		require.NoError(t, err)
		require.Equal(t, parked, g.State, "a retried rescheduled job with its key busy")
		f.requireKey(k, []string{a.ID}, 1, 2)

		_, err = f.retry(x.ID)
		require.ErrorIs(t, err, batondriver.ErrBadParams, "a parked job was retried")
		f.requireState(parked, x.ID)
		f.requireKey(k, []string{a.ID}, 1, 2)

		// An available holder is left as it is.
		f.complete(a)
		before := f.get(x.ID)
		require.Equal(t, available, before.State)
		g, err = f.retry(x.ID)
		require.NoError(t, err)
		require.Equal(t, available, g.State)
		requireNear(t, before.RunAt, g.RunAt, storeSlack)
		f.requireKey(k, []string{x.ID}, 0, 1)

		// A dead job retried with its key free is admitted.
		rx := f.fetchOne(10 * time.Second)
		require.Equal(t, x.ID, rx.ID)
		require.Empty(t, f.finish(0, outcome(rx, batondriver.JobOutcomeDead, "x", time.Time{})))
		f.requireKey(k, []string{s.ID}, 0, 0)
		require.NoError(t, f.del(s.ID))
		g, err = f.retry(x.ID)
		require.NoError(t, err)
		require.Equal(t, available, g.State)
		f.requireKey(k, []string{x.ID}, 0, 0)
	})

	t.Run("BatchSeesEarlierJobs", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		res := f.insertRes(
			keyJob(k, 2), keyJob(k, 2),
			keyJob(k, 2, onBusy(batondriver.OnBusyDrop)),
			keyJob(k, 2, onBusy(batondriver.OnBusyFail)),
			keyJob(k, 2),
			keyJob(k, 2, busyDelay(time.Hour)),
			keyJob(k, 2, onBusy(batondriver.OnBusyDrop)),
			newJob(),
		)
		require.Equal(t, []batondriver.JobInsertStatus{
			batondriver.JobInserted, batondriver.JobInserted, batondriver.JobInserted, batondriver.JobRejected,
			batondriver.JobInserted, batondriver.JobInserted, batondriver.JobInserted, batondriver.JobInserted,
		}, res.Status)
		require.Nil(t, res.Jobs[3])
		require.Equal(t, "key busy", res.Reason[3])
		for i, want := range map[int]batondriver.JobState{0: available, 1: available, 2: dropped, 4: parked, 5: scheduled, 6: dropped, 7: available} {
			require.Equal(t, want, res.Jobs[i].State, "job %d", i)
			require.Equal(t, want, f.get(res.Jobs[i].ID).State, "job %d", i)
		}
		require.Equal(t, busyReason(k, 2, 2), res.Jobs[6].Errors[0].Error)
		f.requireKey(k, ids(res.Jobs[:2]), 0, 1)
		f.countsOf(map[batondriver.JobState]int{available: 3, parked: 1, dropped: 2, scheduled: 1})
		require.EqualValues(t, 2, f.stats().Dropped)
	})

	t.Run("Fairness", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		big := key("big")
		smalls := []string{key("s1"), key("s2"), key("s3")}
		var jobs []*batondriver.JobInsert
		for range 10 {
			jobs = append(jobs, keyJob(big, 1))
		}
		for _, k := range smalls {
			jobs = append(jobs, keyJob(k, 1), keyJob(k, 1))
		}
		jobs = append(jobs, newJob())
		js := f.insertRes(jobs...).Jobs
		b, s, u := js[:10], js[10:16], js[16]
		f.countsOf(map[batondriver.JobState]int{available: 5, parked: 12})
		require.Equal(t, []string{big, smalls[0], smalls[1], smalls[2]}, f.keyNames(), "most parked first")
		for _, k := range append([]string{big}, smalls...) {
			require.Equal(t, 1, f.keyGet(k).Holding, "a key has at most its limit available")
		}

		// Fetch and finish one at a time: each promoted job joins the line
		// behind the keys already in it.
		want := []string{b[0].ID, s[0].ID, s[2].ID, s[4].ID, u.ID, b[1].ID, s[1].ID, s[3].ID, s[5].ID}
		for _, r := range b[2:] {
			want = append(want, r.ID)
		}
		for i, id := range want {
			r := f.fetchOne(10 * time.Second)
			require.Equal(t, id, r.ID, "fetch %d", i)
			f.complete(r)
		}
		require.Empty(t, f.fetch(10).Jobs)
	})

	t.Run("BadParams", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		bad := func(name string, err error) {
			t.Helper()
			require.ErrorIs(t, err, batondriver.ErrBadParams, name)
		}
		long := strings.Repeat("k", batondriver.MaxKeyLen+1)
		insert := func(j *batondriver.JobInsert) error {
			_, err := f.d.JobInsert(f.ctx, &batondriver.JobInsertParams{Queue: f.queue, Jobs: []*batondriver.JobInsert{newJob(), j}})
			return err
		}
		k := key("k")
		bad("insert: key too long", insert(keyJob(long, 1)))
		bad("insert: key without limit", insert(keyJob(k, 0)))
		bad("insert: negative limit", insert(keyJob(k, -1)))
		bad("insert: limit over MaxKeyLimit", insert(keyJob(k, batondriver.MaxKeyLimit+1)))
		bad("insert: unknown policy", insert(keyJob(k, 1, onBusy("later"))))
		bad("insert: reschedule without delay", insert(keyJob(k, 1, onBusy(batondriver.OnBusyReschedule))))
		bad("insert: reschedule under 1ms", insert(keyJob(k, 1, busyDelay(time.Millisecond-1))))
		f.countsOf(nil) // a rejected batch stores nothing
		require.Empty(t, f.keyNames())
		require.EqualValues(t, 0, f.stats().Dropped)
		_, err := f.d.KeyGet(f.ctx, &batondriver.KeyParams{Queue: f.queue, Key: k})
		require.ErrorIs(t, err, batondriver.ErrKeyNotFound, "a rejected batch used a key")

		f.insertIn(available, keyJob(strings.Repeat("k", batondriver.MaxKeyLen), 1))
		f.insertIn(available, keyJob(k, 1, busyDelay(time.Millisecond)))

		setLimit := func(p batondriver.KeySetLimitParams) error {
			_, err := f.d.KeySetLimit(f.ctx, &p)
			return err
		}
		bad("set limit: empty queue", setLimit(batondriver.KeySetLimitParams{Key: k, Limit: 1}))
		bad("set limit: empty key", setLimit(batondriver.KeySetLimitParams{Queue: f.queue, Limit: 1}))
		bad("set limit: key too long", setLimit(batondriver.KeySetLimitParams{Queue: f.queue, Key: long, Limit: 1}))
		bad("set limit: negative", setLimit(batondriver.KeySetLimitParams{Queue: f.queue, Key: k, Limit: -1}))
		bad("set limit: over MaxKeyLimit", setLimit(batondriver.KeySetLimitParams{Queue: f.queue, Key: k, Limit: batondriver.MaxKeyLimit + 1}))
		require.False(t, f.keyGet(k).Override)

		_, err = f.d.KeyGet(f.ctx, &batondriver.KeyParams{Key: k})
		bad("get: empty queue", err)
		for name, p := range map[string]batondriver.KeyListParams{
			"list: empty queue":     {Limit: 1},
			"list: limit over 1000": {Queue: f.queue, Limit: 1001},
			"list: negative limit":  {Queue: f.queue, Limit: -1},
			"list: negative offset": {Queue: f.queue, Offset: -1},
		} {
			_, err := f.d.KeyList(f.ctx, &p)
			bad(name, err)
		}
	})
}
