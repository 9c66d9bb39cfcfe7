package batonmem

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
)

// These tests look inside the memory driver's concurrency keys and unique
// claims: the parked queues, the active index and the claims must agree
// with the jobs' states after every transition.

// keysFixture is one test's driver and queue, with helpers.
type keysFixture struct {
	t *testing.T
	d *Driver
}

func keysSetup(t *testing.T) *keysFixture {
	t.Parallel()
	return &keysFixture{t: t, d: New()}
}

const keysQueue = "q"

func (f *keysFixture) insert(jobs ...*batondriver.JobInsert) *batondriver.JobInsertResult {
	f.t.Helper()
	res, err := f.d.JobInsert(f.t.Context(), &batondriver.JobInsertParams{Queue: keysQueue, Jobs: jobs})
	require.NoError(f.t, err)
	return res
}

func (f *keysFixture) fetch(max int) []*batondriver.JobRow {
	f.t.Helper()
	res, err := f.d.JobFetch(f.t.Context(), &batondriver.JobFetchParams{Queue: keysQueue, Max: max, LeaseTTL: time.Minute})
	require.NoError(f.t, err)
	return res.Jobs
}

func (f *keysFixture) finish(o batondriver.JobOutcome, rows ...*batondriver.JobRow) {
	f.t.Helper()
	p := &batondriver.JobFinishParams{Queue: keysQueue, Retention: time.Hour}
	for _, r := range rows {
		p.Finished = append(p.Finished, &batondriver.JobFinish{JobLease: batondriver.JobLease{ID: r.ID, Lease: r.Lease}, Outcome: o})
	}
	res, err := f.d.JobFinish(f.t.Context(), p)
	require.NoError(f.t, err)
	require.Empty(f.t, res.Stale)
}

func (f *keysFixture) state(id string) batondriver.JobState {
	f.t.Helper()
	r, err := f.d.JobGet(f.t.Context(), &batondriver.JobGetParams{Queue: keysQueue, ID: id})
	require.NoError(f.t, err)
	return r.State
}

// parkedIDs returns key k's parked queue, head first.
func (f *keysFixture) parkedIDs(k string) []string {
	f.d.jobs.mu.Lock()
	defer f.d.jobs.mu.Unlock()
	out := []string{}
	for e := f.d.jobs.queues[keysQueue].keys[k].parked.Front(); e != nil; e = e.Next() {
		out = append(out, e.Value.(*job).row.ID)
	}
	return out
}

// tokens takes the queue's unclaimed wake tokens.
func (f *keysFixture) tokens() int {
	f.d.jobs.mu.Lock()
	defer f.d.jobs.mu.Unlock()
	q := f.d.jobs.queues[keysQueue]
	n := q.tokens
	q.tokens = 0
	return n
}

func keyed(k string, limit int) *batondriver.JobInsert {
	return &batondriver.JobInsert{Kind: "k", MaxAttempts: 3, Key: k, Limit: limit}
}

func ids(rows []*batondriver.JobRow) []string {
	out := []string{}
	for _, r := range rows {
		out = append(out, r.ID)
	}
	return out
}

// TestSetLimitDemotesToParkedHead: lowering a limit moves the available
// holders beyond it, the last admitted first, to the head of the parked
// queue, so that they keep their order before the jobs parked earlier;
// running holders keep their slots.
func TestSetLimitDemotesToParkedHead(t *testing.T) {
	f := keysSetup(t)
	const k = "k"
	js := ids(f.insert(keyed(k, 4), keyed(k, 4), keyed(k, 4), keyed(k, 4), keyed(k, 4)).Jobs)
	run := f.fetch(1)
	require.Equal(t, js[:1], ids(run))
	require.Equal(t, []string{js[4]}, f.parkedIDs(k))
	f.tokens()

	info, err := f.d.KeySetLimit(t.Context(), &batondriver.KeySetLimitParams{Queue: keysQueue, Key: k, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, 2, info.Holding, "the runner and the first admitted available job")
	require.Equal(t, []string{js[2], js[3], js[4]}, f.parkedIDs(k))
	require.Equal(t, batondriver.JobStateAvailable, f.state(js[1]))

	// Halting leaves the runner, and parks every job not started.
	info, err = f.d.KeySetLimit(t.Context(), &batondriver.KeySetLimitParams{Queue: keysQueue, Key: k, Limit: 0})
	require.NoError(t, err)
	require.Equal(t, 1, info.Holding)
	require.Equal(t, 1, info.Running)
	require.Equal(t, []string{js[1], js[2], js[3], js[4]}, f.parkedIDs(k))
	require.Empty(t, f.fetch(10))
	require.Zero(t, f.tokens(), "demotion woke a fetcher")

	// Resetting to the default limit of 4 promotes three, in order.
	info, err = f.d.KeySetLimit(t.Context(), &batondriver.KeySetLimitParams{Queue: keysQueue, Key: k, Reset: true})
	require.NoError(t, err)
	require.Equal(t, 4, info.Limit)
	require.False(t, info.Override)
	require.Equal(t, 3, f.tokens(), "one wake per promoted job")
	require.Equal(t, []string{js[4]}, f.parkedIDs(k))
	require.Equal(t, js[1:4], ids(f.fetch(10)))
	checkKeys(t, f.d)
}

// TestPromotionCountEqualsFreedSlots: each transition promotes exactly as
// many parked jobs as it frees slots, and wakes one fetcher per promoted
// job.
func TestPromotionCountEqualsFreedSlots(t *testing.T) {
	f := keysSetup(t)
	const k = "k"
	var jobs []*batondriver.JobInsert
	for range 10 {
		jobs = append(jobs, keyed(k, 3))
	}
	js := ids(f.insert(jobs...).Jobs)
	require.Equal(t, 3, f.tokens(), "only admitted jobs wake")
	run := f.fetch(10)
	require.Equal(t, js[:3], ids(run))

	// Two outcomes in one call free two slots.
	f.finish(batondriver.JobOutcomeCompleted, run[0], run[1])
	require.Equal(t, 2, f.tokens())
	require.Equal(t, js[5:], f.parkedIDs(k))

	// A retry now frees a slot and readmits its job behind the parked ones:
	// one promoted, the job itself parked.
	f.finish(batondriver.JobOutcomeRetry, run[2])
	require.Equal(t, 1, f.tokens())
	require.Equal(t, append(js[6:], js[2]), f.parkedIDs(k))

	// Raising the limit by 4 promotes 4.
	_, err := f.d.KeySetLimit(t.Context(), &batondriver.KeySetLimitParams{Queue: keysQueue, Key: k, Limit: 7})
	require.NoError(t, err)
	require.Equal(t, 4, f.tokens())
	require.Equal(t, []string{js[2]}, f.parkedIDs(k))

	// Deleting an available holder frees one slot.
	require.NoError(t, f.d.JobDelete(t.Context(), &batondriver.JobGetParams{Queue: keysQueue, ID: js[3]}))
	require.Equal(t, 1, f.tokens())
	require.Empty(t, f.parkedIDs(k))
	require.Equal(t, batondriver.JobStateAvailable, f.state(js[2]))
	checkKeys(t, f.d)
}

// TestAgainWithQueuedTwin: under UniqueQueued a twin inserted while the job
// ran is its next run, and Again queues no second one; without a twin,
// Again requeues the job, which claims its unique key again.
func TestAgainWithQueuedTwin(t *testing.T) {
	f := keysSetup(t)
	unique := func() *batondriver.JobInsert {
		j := keyed("k", 1)
		j.Unique = &batondriver.JobUnique{Key: "u", Scope: batondriver.UniqueQueued}
		return j
	}
	a := f.insert(unique()).Jobs[0]
	res := f.insert(unique())
	require.Equal(t, batondriver.JobDuplicate, res.Status[0])
	require.Equal(t, a.ID, res.Jobs[0].ID)

	run := f.fetch(1)[0]
	require.Equal(t, a.ID, run.ID)
	res = f.insert(unique()) // a runs: its claim is gone
	require.Equal(t, batondriver.JobInserted, res.Status[0])
	twin := res.Jobs[0]
	require.Equal(t, batondriver.JobStateParked, twin.State, "a holds the key's one slot")

	f.finish(batondriver.JobOutcomeAgain, run)
	g, err := f.d.JobGet(t.Context(), &batondriver.JobGetParams{Queue: keysQueue, ID: a.ID})
	require.NoError(t, err)
	require.Equal(t, batondriver.JobStateCompleted, g.State, "a second run was queued beside the twin")
	require.Zero(t, g.Runs)
	require.Equal(t, batondriver.JobStateAvailable, f.state(twin.ID), "the twin took the freed slot")

	run = f.fetch(1)[0]
	require.Equal(t, twin.ID, run.ID)
	f.finish(batondriver.JobOutcomeAgain, run)
	g, err = f.d.JobGet(t.Context(), &batondriver.JobGetParams{Queue: keysQueue, ID: twin.ID})
	require.NoError(t, err)
	require.Equal(t, batondriver.JobStateAvailable, g.State)
	require.Equal(t, 1, g.Runs)
	require.Zero(t, g.Attempt)
	res = f.insert(unique())
	require.Equal(t, batondriver.JobDuplicate, res.Status[0], "the next run holds the claim")
	require.Equal(t, twin.ID, res.Jobs[0].ID)
	checkKeys(t, f.d)
}

// TestFenceFloor: a queue's fence rises by one past a fence above the
// clock's floor, and jumps to the floor otherwise.
func TestFenceFloor(t *testing.T) {
	t.Parallel()
	now := time.Now()
	q := &queueState{}
	require.Equal(t, now.UnixMilli()*1024, q.nextFence(now))
	require.Equal(t, now.UnixMilli()*1024+1, q.nextFence(now))
	q.fence = 1 << 62
	require.Equal(t, int64(1<<62+1), q.nextFence(now))
}

// TestPeriodClaimsLapse: a fetch forgets lapsed period claims, and only
// those.
func TestPeriodClaimsLapse(t *testing.T) {
	f := keysSetup(t)
	period := func(key string, d time.Duration) *batondriver.JobInsert {
		return &batondriver.JobInsert{Kind: "k", MaxAttempts: 1,
			Unique: &batondriver.JobUnique{Key: key, Scope: batondriver.UniquePeriod, Period: d}}
	}
	f.insert(period("short", 20*time.Millisecond), period("long", time.Hour))
	res := f.insert(period("short", time.Hour))
	require.Equal(t, batondriver.JobDuplicate, res.Status[0])
	time.Sleep(30 * time.Millisecond)
	f.fetch(10)
	f.d.jobs.mu.Lock()
	q := f.d.jobs.queues[keysQueue]
	require.Len(t, q.claims, 1)
	require.NotNil(t, q.claims[claimKey{"long", batondriver.UniquePeriod}])
	require.Len(t, q.lapses, 1)
	f.d.jobs.mu.Unlock()
	res = f.insert(period("short", time.Hour))
	require.Equal(t, batondriver.JobInserted, res.Status[0], "a lapsed claim conflicted")
}

// checkKeys fails the test unless every queue's keys agree with its jobs:
// holders are exactly the available and running jobs of a key but the
// chained ones, the parked queue exactly its parked jobs, only active keys
// kept; no parked job waits while its key has a slot for it; every claim
// but a period claim belongs to a job in a state of its scope; and chains
// are linked both ways (checkChains).
func checkKeys(t *testing.T, d *Driver) {
	t.Helper()
	d.jobs.mu.Lock()
	defer d.jobs.mu.Unlock()
	for _, q := range d.jobs.queues {
		checkIndexes(t, q)
		checkChains(t, q)
		holders, parked := map[string]int{}, map[string]int{}
		for _, j := range q.jobs {
			if j.row.Key == "" {
				continue
			}
			switch {
			case j.row.After != "":
				require.Nil(t, q.keys[j.row.Key].holders[j.row.ID], "chained job %s holds a slot", j.row.ID)
			case j.row.State == batondriver.JobStateAvailable, j.row.State == batondriver.JobStateRunning:
				holders[j.row.Key]++
				require.Same(t, j, q.keys[j.row.Key].holders[j.row.ID], "holder %s not in its key", j.row.ID)
			case j.row.State == batondriver.JobStateParked:
				parked[j.row.Key]++
				require.Same(t, j, j.parkElem.Value, "parked job %s", j.row.ID)
			}
		}
		for name, k := range q.keys {
			require.Equal(t, holders[name], len(k.holders), "holders of %s", name)
			require.Equal(t, parked[name], k.parked.Len(), "parked of %s", name)
			for e := k.parked.Front(); e != nil; e = e.Next() {
				j := e.Value.(*job)
				require.Equal(t, batondriver.JobStateParked, j.row.State)
				require.Equal(t, name, j.row.Key)
			}
			require.True(t, k.active(), "idle key %s kept", name)
			require.Equal(t, name, k.name)
			if head := k.parked.Front(); head != nil {
				require.GreaterOrEqual(t, len(k.holders), k.limitFor(head.Value.(*job)), "key %s stalled", name)
			}
		}
		for ck, c := range q.claims {
			require.Equal(t, ck, c.claimKey)
			if !c.until.IsZero() {
				continue
			}
			j := q.jobs[c.id]
			require.NotNil(t, j, "claim %v of a gone job", ck)
			require.Equal(t, ck, claimKey{j.row.Unique, j.row.UniqueScope}, "claim of job %s", c.id)
			require.True(t, inScope(j.row.State, ck.scope), "%s claim of a %s job", ck.scope, j.row.State)
		}
	}
}

// checkChains fails the test unless every chained job is running behind a
// running keyed job of its key that is not chained, that names it as its
// next and shares its LeaseUntil, and every next is such a chained job.
func checkChains(t *testing.T, q *queueState) {
	t.Helper()
	for _, j := range q.jobs {
		if j.next != nil {
			require.Same(t, j.next, q.jobs[j.next.row.ID], "job %s chained behind %s is gone", j.next.row.ID, j.row.ID)
			require.Equal(t, j.row.ID, j.next.row.After, "job %s has next %s, chained elsewhere", j.row.ID, j.next.row.ID)
		}
		if j.row.After == "" {
			continue
		}
		h := q.jobs[j.row.After]
		require.NotNil(t, h, "job %s chained behind a gone job", j.row.ID)
		require.Same(t, j, h.next, "job %s chained behind %s, which does not name it", j.row.ID, h.row.ID)
		require.Equal(t, batondriver.JobStateRunning, j.row.State)
		require.Equal(t, batondriver.JobStateRunning, h.row.State)
		require.Empty(t, h.row.After, "job %s chained behind chained %s", j.row.ID, h.row.ID)
		require.Nil(t, j.next, "a job chained behind chained %s", j.row.ID)
		require.Equal(t, h.row.Key, j.row.Key)
		require.Same(t, h, q.keys[h.row.Key].holders[h.row.ID], "job %s ahead holds no slot", h.row.ID)
		require.Equal(t, h.row.LeaseUntil, j.row.LeaseUntil, "chained %s and %s differ in lease", j.row.ID, h.row.ID)
		require.Greater(t, j.row.Fence, h.row.Fence)
	}
}

// TestKeysStayConsistent runs random keyed and unique transitions, with
// leases and delays short enough to expire, limits changed on the way,
// chained leases asked for at random, jobs of one key with different
// default limits (mixed defaults) and jobs given back, and checks the
// keys, claims and chains after each.
func TestKeysStayConsistent(t *testing.T) {
	f := keysSetup(t)
	d, ctx := f.d, t.Context()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	keys := []string{"a", "b", "c"}
	limits := map[string]int{"a": 1, "b": 2, "c": 3}
	policies := []batondriver.OnBusy{"", batondriver.OnBusyWait, batondriver.OnBusyDrop, batondriver.OnBusyReschedule, batondriver.OnBusyFail}
	scopes := []batondriver.UniqueScope{batondriver.UniqueQueued, batondriver.UniqueRunning, batondriver.UniqueUntilDone, batondriver.UniquePeriod}
	answers := []batondriver.UniqueConflict{batondriver.UniqueReturnExisting, batondriver.UniqueReplace, batondriver.UniqueReject}
	outcomes := []batondriver.JobOutcome{
		batondriver.JobOutcomeCompleted, batondriver.JobOutcomeRetry, batondriver.JobOutcomeSnooze,
		batondriver.JobOutcomeCancel, batondriver.JobOutcomeDead, batondriver.JobOutcomeAgain,
	}
	ms := func(n int) time.Duration { return time.Duration(rng.IntN(n)) * time.Millisecond }
	var leased []*batondriver.JobRow
	var all []string
	chained := 0
	lease := func(rows []*batondriver.JobRow) {
		for _, r := range rows {
			if r.After != "" {
				chained++
			}
		}
		leased = append(leased, rows...)
	}
	for range 2000 {
		switch rng.IntN(11) {
		case 0, 1, 2:
			var jobs []*batondriver.JobInsert
			for range 1 + rng.IntN(4) {
				j := &batondriver.JobInsert{Kind: "k", MaxAttempts: 1 + rng.IntN(3), RunAt: time.Now().Add(ms(10) - 5*time.Millisecond)}
				if rng.IntN(5) > 0 {
					j.Key = keys[rng.IntN(len(keys))]
					j.Limit = limits[j.Key]
					if rng.IntN(3) == 0 { // mixed defaults
						j.Limit = 1 + rng.IntN(4)
					}
					j.OnBusy = policies[rng.IntN(len(policies))]
					j.BusyDelay = time.Millisecond + ms(5)
				}
				if rng.IntN(3) == 0 {
					j.Unique = &batondriver.JobUnique{Key: keys[rng.IntN(len(keys))], Scope: scopes[rng.IntN(len(scopes))],
						Period: time.Millisecond + ms(10), OnConflict: answers[rng.IntN(len(answers))]}
				}
				jobs = append(jobs, j)
			}
			res, err := d.JobInsert(ctx, &batondriver.JobInsertParams{Queue: keysQueue, Jobs: jobs})
			require.NoError(t, err)
			for _, r := range res.Jobs {
				if r != nil {
					all = append(all, r.ID)
				}
			}
		case 3, 4:
			res, err := d.JobFetch(ctx, &batondriver.JobFetchParams{Queue: keysQueue, Max: rng.IntN(6),
				LeaseTTL: time.Millisecond + ms(5), RecoverDelay: ms(3), DroppedRetention: ms(20), Chain: rng.IntN(2) == 0})
			require.NoError(t, err)
			lease(res.Jobs)
		case 5, 6:
			if len(leased) == 0 {
				continue
			}
			p := &batondriver.JobFinishParams{Queue: keysQueue, Retention: ms(5), Chain: rng.IntN(2) == 0}
			for range 1 + rng.IntN(min(3, len(leased))) {
				i := rng.IntN(len(leased))
				r := leased[i]
				leased = append(leased[:i], leased[i+1:]...)
				fin := &batondriver.JobFinish{
					JobLease: batondriver.JobLease{ID: r.ID, Lease: r.Lease}, Outcome: outcomes[rng.IntN(len(outcomes))],
					RunAt: time.Now().Add(ms(6) - 3*time.Millisecond), Unchain: rng.IntN(4) == 0,
				}
				if rng.IntN(6) == 0 { // its client stops
					fin.Outcome, fin.RunAt, fin.Unchain, fin.GiveBack = batondriver.JobOutcomeSnooze, time.Time{}, false, true
				}
				p.Finished = append(p.Finished, fin)
			}
			if rng.IntN(2) == 0 {
				p.Fetch = &batondriver.JobFinishFetch{Max: 1 + rng.IntN(2), LeaseTTL: time.Millisecond + ms(5)}
			}
			res, err := d.JobFinish(ctx, p)
			require.NoError(t, err)
			lease(res.Jobs)
		case 7:
			p := &batondriver.KeySetLimitParams{Queue: keysQueue, Key: keys[rng.IntN(len(keys))], Limit: rng.IntN(4), Reset: rng.IntN(3) == 0}
			_, err := d.KeySetLimit(ctx, p)
			require.NoError(t, err)
		case 8:
			if len(all) == 0 {
				continue
			}
			_, _ = d.JobRetry(ctx, &batondriver.JobGetParams{Queue: keysQueue, ID: all[rng.IntN(len(all))]})
		case 9:
			if len(all) == 0 {
				continue
			}
			_ = d.JobDelete(ctx, &batondriver.JobGetParams{Queue: keysQueue, ID: all[rng.IntN(len(all))]})
		case 10:
			if len(leased) == 0 {
				continue
			}
			r := leased[rng.IntN(len(leased))]
			_, err := d.JobExtend(ctx, &batondriver.JobExtendParams{Queue: keysQueue, TTL: time.Millisecond + ms(5),
				Leases: []batondriver.JobLease{{ID: r.ID, Lease: r.Lease}}})
			require.NoError(t, err)
		}
		checkKeys(t, d)
	}
	require.Positive(t, chained, "no job was ever chained")
	st, err := d.QueueStats(ctx, &batondriver.QueueParams{Queue: keysQueue})
	require.NoError(t, err)
	t.Logf("counts at the end: %v, %d keys, %d dropped, %d jobs chained", st.Counts, st.Keys, st.Dropped, chained)
}

// TestSetLimitForgetsUnusedQueue: a limit set and reset, or reset, on a key
// of a queue that never had a job leaves nothing behind.
func TestSetLimitForgetsUnusedQueue(t *testing.T) {
	f := keysSetup(t)
	ctx := t.Context()
	for i := range 10 {
		q := fmt.Sprint("unused-", i)
		_, err := f.d.KeySetLimit(ctx, &batondriver.KeySetLimitParams{Queue: q, Key: "k", Reset: true})
		require.NoError(t, err)
		_, err = f.d.KeySetLimit(ctx, &batondriver.KeySetLimitParams{Queue: q + "x", Key: "k", Limit: 1})
		require.NoError(t, err)
		_, err = f.d.KeySetLimit(ctx, &batondriver.KeySetLimitParams{Queue: q + "x", Key: "k", Reset: true})
		require.NoError(t, err)
	}
	_, err := f.d.KeySetLimit(ctx, &batondriver.KeySetLimitParams{Queue: "halted", Key: "k", Limit: 0})
	require.NoError(t, err)
	f.d.jobs.mu.Lock()
	defer f.d.jobs.mu.Unlock()
	require.Equal(t, []string{"halted"}, slices.Collect(maps.Keys(f.d.jobs.queues)), "only the queue with an override is kept")
}
