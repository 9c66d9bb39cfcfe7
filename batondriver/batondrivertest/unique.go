package batondrivertest

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
)

// Short names for the uniqueness scopes and answers.
const (
	queued    = batondriver.UniqueQueued
	inRunning = batondriver.UniqueRunning
	untilDone = batondriver.UniqueUntilDone
	inPeriod  = batondriver.UniquePeriod

	existing = batondriver.UniqueReturnExisting
	replace  = batondriver.UniqueReplace
	reject   = batondriver.UniqueReject
)

// uniq makes a job unique under u with scope and conflict answer; the
// period of UniquePeriod is an hour.
func uniq(u string, scope batondriver.UniqueScope, conflict batondriver.UniqueConflict) func(j *batondriver.JobInsert) {
	return func(j *batondriver.JobInsert) {
		j.Unique = &batondriver.JobUnique{Key: u, Scope: scope, OnConflict: conflict}
		if scope == inPeriod {
			j.Unique.Period = time.Hour
		}
	}
}

func args(a string) func(j *batondriver.JobInsert) {
	return func(j *batondriver.JobInsert) { j.Args = []byte(a) }
}

// uniqueJob returns newJob made unique under u, changed by each set in
// turn.
func uniqueJob(u string, scope batondriver.UniqueScope, conflict batondriver.UniqueConflict, set ...func(j *batondriver.JobInsert)) *batondriver.JobInsert {
	j := newJob()
	uniq(u, scope, conflict)(j)
	for _, s := range set {
		s(j)
	}
	return j
}

// insertAs inserts one job, requires the status want, and returns the
// result's row (the job's or its twin's) and reason.
func (f *jobFixture) insertAs(want batondriver.JobInsertStatus, j *batondriver.JobInsert) (*batondriver.JobRow, string) {
	f.t.Helper()
	res := f.insertRes(j)
	require.Equal(f.t, want, res.Status[0], "insert status (reason %q)", res.Reason[0])
	return res.Jobs[0], res.Reason[0]
}

// requireTwin asserts that an insert resolved to the job twin in state
// state, and that the twin's stored args are wantArgs.
func (f *jobFixture) requireTwin(row *batondriver.JobRow, twin string, state batondriver.JobState, wantArgs string) {
	f.t.Helper()
	require.NotNil(f.t, row, "no row for the twin")
	require.Equal(f.t, twin, row.ID, "the twin")
	require.Equal(f.t, state, row.State, "the twin's state")
	require.Equal(f.t, wantArgs, string(row.Args), "the twin's args as returned")
	g := f.get(twin)
	require.Equal(f.t, state, g.State)
	require.Equal(f.t, wantArgs, string(g.Args), "the twin's args as stored")
}

// requireKeyFree asserts that no job claims unique key u: a twin unique
// while queued is inserted, and then holds the key against a twin unique
// until done.
func (f *jobFixture) requireKeyFree(u string) {
	f.t.Helper()
	b, _ := f.insertAs(batondriver.JobInserted, uniqueJob(u, queued, reject))
	_, reason := f.insertAs(batondriver.JobRejected, uniqueJob(u, untilDone, reject))
	require.Equal(f.t, "duplicate of "+b.ID, reason, "the queued twin holds the key")
}

// twinStates makes a twin — the job j inserted — end up in a state. Each
// leaves nothing available in the queue but, for available and parked,
// the twin and its key's holder.
var twinStates = []struct {
	name  string
	state batondriver.JobState
	make  func(f *jobFixture, j *batondriver.JobInsert) *batondriver.JobRow
}{
	{"Scheduled", scheduled, func(f *jobFixture, j *batondriver.JobInsert) *batondriver.JobRow {
		j.RunAt = time.Now().Add(time.Hour)
		return f.insertIn(scheduled, j)
	}},
	{"Parked", parked, func(f *jobFixture, j *batondriver.JobInsert) *batondriver.JobRow {
		k := key("k")
		f.insertIn(available, keyJob(k, 1))
		j.Key, j.Limit = k, 1
		return f.insertIn(parked, j)
	}},
	{"Available", available, func(f *jobFixture, j *batondriver.JobInsert) *batondriver.JobRow {
		return f.insertIn(available, j)
	}},
	{"Running", running, func(f *jobFixture, j *batondriver.JobInsert) *batondriver.JobRow {
		return f.runTwin(j)
	}},
	{"Retried", scheduled, func(f *jobFixture, j *batondriver.JobInsert) *batondriver.JobRow {
		r := f.runTwin(j)
		f.done(r, batondriver.JobOutcomeRetry, time.Now().Add(time.Hour))
		return r
	}},
	{"Completed", completed, func(f *jobFixture, j *batondriver.JobInsert) *batondriver.JobRow {
		r := f.runTwin(j)
		f.done(r, batondriver.JobOutcomeCompleted, time.Time{})
		return r
	}},
	{"Cancelled", cancelled, func(f *jobFixture, j *batondriver.JobInsert) *batondriver.JobRow {
		r := f.runTwin(j)
		f.done(r, batondriver.JobOutcomeCancel, time.Time{})
		return r
	}},
	{"Dead", dead, func(f *jobFixture, j *batondriver.JobInsert) *batondriver.JobRow {
		r := f.runTwin(j)
		f.done(r, batondriver.JobOutcomeDead, time.Time{})
		return r
	}},
	{"Dropped", dropped, func(f *jobFixture, j *batondriver.JobInsert) *batondriver.JobRow {
		k := key("k")
		f.hold(k, 1, 10*time.Second)
		j.Key, j.Limit, j.OnBusy = k, 1, batondriver.OnBusyDrop
		return f.insertIn(dropped, j)
	}},
}

// runTwin inserts j and leases it.
func (f *jobFixture) runTwin(j *batondriver.JobInsert) *batondriver.JobRow {
	f.t.Helper()
	r := f.insertIn(available, j)
	got := f.fetchOne(10 * time.Second)
	require.Equal(f.t, r.ID, got.ID)
	return got
}

// conflicts says, per scope, which twin states an insert conflicts with.
// A queued-scope job gives its claim up when it starts and takes it back
// when it is queued again (retried), unless a twin took it meanwhile.
var conflicts = map[batondriver.UniqueScope]map[string]bool{
	queued:    {"Scheduled": true, "Parked": true, "Available": true, "Running": false, "Retried": true, "Completed": false, "Cancelled": false, "Dead": false, "Dropped": false},
	inRunning: {"Scheduled": false, "Parked": false, "Available": false, "Running": true, "Retried": false, "Completed": false, "Cancelled": false, "Dead": false, "Dropped": false},
	untilDone: {"Scheduled": true, "Parked": true, "Available": true, "Running": true, "Retried": true, "Completed": false, "Cancelled": false, "Dead": false, "Dropped": false},
	inPeriod:  {"Scheduled": true, "Parked": true, "Available": true, "Running": true, "Retried": true, "Completed": true, "Cancelled": true, "Dead": true, "Dropped": true},
}

func exerciseUnique(t *testing.T, newDriver func(t *testing.T) batondriver.JobDriver) {
	const u = "u{x}%|é"

	for _, scope := range []batondriver.UniqueScope{queued, inRunning, untilDone, inPeriod} {
		for _, tw := range twinStates {
			conflict, ok := conflicts[scope][tw.name]
			if !ok {
				continue
			}
			t.Run("Scope_"+string(scope)+"_"+tw.name, func(t *testing.T) {
				f := newJobFixture(t, newDriver)
				twin := tw.make(f, uniqueJob(u, scope, existing))
				require.Equal(t, u, twin.Unique)
				require.Equal(t, scope, twin.UniqueScope)
				before := f.stats().Counts
				want := batondriver.JobInserted
				if conflict {
					want = batondriver.JobDuplicate
				}
				row, _ := f.insertAs(want, uniqueJob(u, scope, existing, args(`{"n":2}`)))
				if conflict {
					f.requireTwin(row, twin.ID, tw.state, `{"n":1}`)
					require.Equal(t, before, f.stats().Counts, "a duplicate stored something")
					return
				}
				require.NotEqual(t, twin.ID, row.ID)
				require.Equal(t, available, row.State)
				require.Equal(t, `{"n":2}`, string(row.Args))
				f.requireState(tw.state, twin.ID)
			})
		}
	}

	// The answers, each against a twin in a state its scope conflicts with.
	answers := []struct {
		scope batondriver.UniqueScope
		twin  string
	}{
		{queued, "Available"}, {queued, "Parked"}, {inRunning, "Running"}, {untilDone, "Scheduled"},
		{untilDone, "Running"}, {inPeriod, "Available"}, {inPeriod, "Completed"},
	}
	for _, a := range answers {
		for _, tw := range twinStates {
			if tw.name != a.twin {
				continue
			}
			for _, answer := range []batondriver.UniqueConflict{"", existing, replace, reject} {
				name := string(answer)
				if name == "" {
					name = "default"
				}
				t.Run("Answer_"+name+"_"+string(a.scope)+"_"+tw.name, func(t *testing.T) {
					f := newJobFixture(t, newDriver)
					twin := tw.make(f, uniqueJob(u, a.scope, answer))
					before := f.stats().Counts
					// Under the twin's key, as the client computes both
					// keys from the same kind of args.
					res := f.insertRes(uniqueJob(u, a.scope, answer, args(`{"n":2}`),
						func(j *batondriver.JobInsert) { j.Key, j.Limit = twin.Key, twin.Limit }))
					row := res.Jobs[0]
					switch {
					case answer == reject:
						require.Equal(t, batondriver.JobRejected, res.Status[0])
						require.Equal(t, "duplicate of "+twin.ID, res.Reason[0])
						f.requireTwin(row, twin.ID, tw.state, `{"n":1}`)
					case answer == replace && (tw.state == available || tw.state == parked || tw.state == scheduled):
						require.Equal(t, batondriver.JobReplaced, res.Status[0])
						f.requireTwin(row, twin.ID, tw.state, `{"n":2}`)
						requireNear(t, twin.RunAt, row.RunAt, storeSlack, "an undelayed insert moved its twin")
					default: // existing, or replace of a twin no longer queued
						require.Equal(t, batondriver.JobDuplicate, res.Status[0])
						f.requireTwin(row, twin.ID, tw.state, `{"n":1}`)
					}
					require.Equal(t, before, f.stats().Counts, "a conflicting insert stored a job")
				})
			}
		}
	}

	t.Run("RowFields", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		a := f.insertIn(available, uniqueJob(u, untilDone, existing))
		require.Equal(t, u, a.Unique)
		require.Equal(t, untilDone, a.UniqueScope)
		g := f.get(a.ID)
		require.Equal(t, u, g.Unique)
		require.Equal(t, untilDone, g.UniqueScope)
		b := f.insertOne(newJob())
		require.Empty(t, b.Unique)
		require.Empty(t, b.UniqueScope)
		require.Empty(t, b.Key)
		require.Zero(t, b.Fence)
	})

	t.Run("UniquePerQueue", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		g := *f
		g.queue = uniqueQueue()
		f.insertAs(batondriver.JobInserted, uniqueJob(u, untilDone, reject))
		g.insertAs(batondriver.JobInserted, uniqueJob(u, untilDone, reject))
		f.insertAs(batondriver.JobRejected, uniqueJob(u, untilDone, reject))
	})

	t.Run("BatchSeesEarlierTwin", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		res := f.insertRes(
			uniqueJob(u, untilDone, existing),
			uniqueJob(u, untilDone, existing, args(`{"n":2}`)),
			uniqueJob(u, untilDone, reject, args(`{"n":3}`)),
			uniqueJob(u, untilDone, replace, args(`{"n":4}`)),
			uniqueJob("other", untilDone, existing),
		)
		require.Equal(t, []batondriver.JobInsertStatus{
			batondriver.JobInserted, batondriver.JobDuplicate, batondriver.JobRejected, batondriver.JobReplaced, batondriver.JobInserted,
		}, res.Status)
		a := res.Jobs[0].ID
		for _, r := range res.Jobs[1:4] {
			require.Equal(t, a, r.ID)
		}
		require.Equal(t, "duplicate of "+a, res.Reason[2])
		require.Equal(t, `{"n":4}`, string(res.Jobs[3].Args))
		require.Equal(t, `{"n":4}`, string(f.get(a).Args))
		require.NotEqual(t, a, res.Jobs[4].ID)
		f.countsOf(map[batondriver.JobState]int{available: 2})
	})

	t.Run("ReplaceDebounces", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		a := f.insertIn(scheduled, uniqueJob(u, untilDone, replace, runAtTime(time.Now().Add(time.Hour))))

		// A delayed insert moves a scheduled twin, later or earlier.
		later := time.Now().Add(2 * time.Hour)
		row, _ := f.insertAs(batondriver.JobReplaced, uniqueJob(u, untilDone, replace, runAtTime(later), args(`{"n":2}`)))
		f.requireTwin(row, a.ID, scheduled, `{"n":2}`)
		requireNear(t, later, row.RunAt, storeSlack)
		requireNear(t, later, f.get(a.ID).RunAt, storeSlack)
		sooner := time.Now().Add(30 * time.Minute)
		row, _ = f.insertAs(batondriver.JobReplaced, uniqueJob(u, untilDone, replace, runAtTime(sooner), args(`{"n":3}`)))
		f.requireTwin(row, a.ID, scheduled, `{"n":3}`)
		requireNear(t, sooner, row.RunAt, storeSlack)
		res := f.fetch(10)
		require.Empty(t, res.Jobs)
		requireNear(t, sooner, res.NextRunAt, storeSlack, "the moved job's place in the schedule")

		// An undelayed insert gives only its args.
		row, _ = f.insertAs(batondriver.JobReplaced, uniqueJob(u, untilDone, replace, args(`{"n":4}`)))
		f.requireTwin(row, a.ID, scheduled, `{"n":4}`)
		requireNear(t, sooner, row.RunAt, storeSlack)
		f.countsOf(map[batondriver.JobState]int{scheduled: 1})

		// A delayed insert leaves an available twin where it is.
		b := f.insertIn(available, uniqueJob("b", queued, replace))
		row, _ = f.insertAs(batondriver.JobReplaced, uniqueJob("b", queued, replace, runAtTime(time.Now().Add(time.Hour)), args(`{"n":5}`)))
		f.requireTwin(row, b.ID, available, `{"n":5}`)
		requireNear(t, b.RunAt, row.RunAt, storeSlack)
		got := f.fetchOne(10 * time.Second)
		require.Equal(t, b.ID, got.ID)
		require.Equal(t, `{"n":5}`, string(got.Args))
	})

	t.Run("ReplaceDebouncesInBatch", func(t *testing.T) {
		// The twin is scheduled by the same insert: the move holds too.
		f := newJobFixture(t, newDriver)
		sooner := time.Now().Add(30 * time.Minute)
		res := f.insertRes(
			uniqueJob(u, untilDone, replace, runAtTime(time.Now().Add(time.Hour))),
			uniqueJob(u, untilDone, replace, runAtTime(sooner), args(`{"n":2}`)),
		)
		require.Equal(t, []batondriver.JobInsertStatus{batondriver.JobInserted, batondriver.JobReplaced}, res.Status)
		a := res.Jobs[0].ID
		f.requireTwin(res.Jobs[1], a, scheduled, `{"n":2}`)
		requireNear(t, sooner, f.get(a).RunAt, storeSlack)
		got := f.fetch(10)
		require.Empty(t, got.Jobs)
		requireNear(t, sooner, got.NextRunAt, storeSlack, "the moved job's place in the schedule")
	})

	t.Run("ReplaceKeepsParkedPlace", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		h := f.insertIn(available, keyJob(k, 1))
		p := f.insertIn(parked, keyJob(k, 1, uniq(u, queued, replace)))
		q := f.insertIn(parked, keyJob(k, 1))
		row, _ := f.insertAs(batondriver.JobReplaced, keyJob(k, 1, uniq(u, queued, replace), args(`{"n":2}`)))
		f.requireTwin(row, p.ID, parked, `{"n":2}`)
		f.requireKey(k, []string{h.ID}, 0, 2)
		f.cycle(h.ID, p.ID, q.ID)
	})

	// A queued twin of another kind or concurrency key keeps its args:
	// under its kind they would run another kind's handler, under its key
	// another key's job would take this key's slot. The insert is refused
	// with the reason, and nothing changes.
	t.Run("ReplaceRefusesAnotherKindOrKey", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		a, b := key("a"), key("b")
		h := f.insertIn(available, keyJob(a, 1))
		p := f.insertIn(parked, keyJob(a, 1, uniq(u, untilDone, replace)))
		s := f.insertIn(scheduled, uniqueJob("s", untilDone, replace, runAtTime(time.Now().Add(time.Hour))))
		for _, c := range []struct {
			twin *batondriver.JobRow
			in   *batondriver.JobInsert
		}{
			{p, keyJob(b, 1, uniq(u, untilDone, replace), args(`{"n":2}`))},
			{p, uniqueJob(u, untilDone, replace, args(`{"n":2}`))},
			{p, keyJob(a, 1, uniq(u, untilDone, replace), args(`{"n":2}`), func(j *batondriver.JobInsert) { j.Kind = "other" })},
			{s, uniqueJob("s", untilDone, replace, args(`{"n":2}`), func(j *batondriver.JobInsert) { j.Kind = "other" })},
			{s, keyJob(b, 1, uniq("s", untilDone, replace), args(`{"n":2}`), runAtTime(time.Now().Add(2*time.Hour)))},
		} {
			row, reason := f.insertAs(batondriver.JobRejected, c.in)
			require.Equal(t, c.twin.ID, row.ID, "the twin")
			require.Equal(t, batondriver.NotReplaced(c.twin.ID, c.twin.Kind, c.twin.Key, c.in.Kind, c.in.Key), reason)
			g := f.get(c.twin.ID)
			require.Equal(t, `{"n":1}`, string(g.Args), "the twin's args")
			requireNear(t, c.twin.RunAt, g.RunAt, storeSlack, "the twin's run time")
		}
		f.requireKey(a, []string{h.ID}, 0, 1)
		_, err := f.d.KeyGet(f.ctx, &batondriver.KeyParams{Queue: f.queue, Key: b})
		require.ErrorIs(t, err, batondriver.ErrKeyNotFound, "key b is idle")
		f.countsOf(map[batondriver.JobState]int{available: 1, parked: 1, scheduled: 1})
		f.cycle(h.ID, p.ID)
	})

	t.Run("ScopeIsTheNewJobs", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		a := f.runTwin(uniqueJob(u, untilDone, existing))
		// a runs: no conflict for a queued-scope insert, which claims u.
		b, _ := f.insertAs(batondriver.JobInserted, uniqueJob(u, queued, existing))
		row, _ := f.insertAs(batondriver.JobDuplicate, uniqueJob(u, untilDone, existing))
		require.Equal(t, b.ID, row.ID)
		// a ending releases no claim but its own.
		f.complete(a)
		row, _ = f.insertAs(batondriver.JobDuplicate, uniqueJob(u, untilDone, existing))
		require.Equal(t, b.ID, row.ID, "a finished job released its twin's claim")
	})

	t.Run("RejectedInsertClaimsNothing", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		f.hold(k, 1, 10*time.Second)
		res := f.insertRes(keyJob(k, 1, onBusy(batondriver.OnBusyFail), uniq(u, untilDone, existing)))
		require.Equal(t, batondriver.JobRejected, res.Status[0])
		require.Equal(t, "key busy", res.Reason[0])
		require.Nil(t, res.Jobs[0])
		f.insertAs(batondriver.JobInserted, uniqueJob(u, untilDone, existing))
	})

	t.Run("DroppedInsertClaimsNothing", func(t *testing.T) {
		// A job its busy key drops at its insert ends there, unique while
		// queued or until done: it holds no claim, so a period insert of its
		// key, less than the period after it, conflicts with nothing.
		f := newJobFixture(t, newDriver)
		k := key("k")
		f.hold(k, 1, 10*time.Second)
		for _, scope := range []batondriver.UniqueScope{queued, untilDone} {
			u := u + string(scope)
			f.insertIn(dropped, keyJob(k, 1, onBusy(batondriver.OnBusyDrop), uniq(u, scope, reject)))
			f.insertAs(batondriver.JobInserted, uniqueJob(u, inPeriod, reject))
		}
	})

	t.Run("RunningScopeClaimsNothingWhileQueued", func(t *testing.T) {
		// A job unique while running claims its key only when it starts:
		// while it is queued, a twin of another scope takes the key.
		f := newJobFixture(t, newDriver)
		f.insertIn(available, uniqueJob(u, inRunning, reject))
		f.requireKeyFree(u)
	})

	t.Run("RunningClaimEndsWhenQueuedAgainByAgain", func(t *testing.T) {
		// A job unique while running that asks to run again is queued: its
		// claim ends there, and a twin of another scope takes the key.
		f := newJobFixture(t, newDriver)
		a := f.runTwin(uniqueJob(u, inRunning, reject))
		require.Empty(t, f.finish(0, outcome(a, batondriver.JobOutcomeAgain, "", time.Time{})))
		f.requireState(available, a.ID)
		f.requireKeyFree(u)
	})

	// A job unique while running that starts claims its key beside the
	// claims of other scopes, which stay with their jobs while it runs
	// and after it ends — a period's (a throttle, its job completed or
	// still scheduled), a queued twin's, a twin's until done (queued, or
	// running beside it).
	later := runAtTime(time.Now().Add(time.Hour))
	for _, c := range []struct {
		name  string
		scope batondriver.UniqueScope
		make  func(f *jobFixture) *batondriver.JobRow
	}{
		{"PeriodOfCompleted", inPeriod, func(f *jobFixture) *batondriver.JobRow {
			p := f.runTwin(uniqueJob(u, inPeriod, reject))
			f.complete(p)
			return p
		}},
		{"PeriodOfScheduled", inPeriod, func(f *jobFixture) *batondriver.JobRow {
			return f.insertIn(scheduled, uniqueJob(u, inPeriod, reject, later))
		}},
		{"Queued", queued, func(f *jobFixture) *batondriver.JobRow {
			return f.insertIn(scheduled, uniqueJob(u, queued, reject, later))
		}},
		{"UntilDoneQueued", untilDone, func(f *jobFixture) *batondriver.JobRow {
			return f.insertIn(scheduled, uniqueJob(u, untilDone, reject, later))
		}},
		{"UntilDoneRunning", untilDone, func(f *jobFixture) *batondriver.JobRow {
			// Inserted before it runs: a twin unique while running,
			// inserted while it runs, would be its duplicate.
			return f.insertIn(available, uniqueJob(u, untilDone, reject))
		}},
	} {
		t.Run("RunningStartLeavesClaimOf"+c.name, func(t *testing.T) {
			f := newJobFixture(t, newDriver)
			h := c.make(f)
			f.insertIn(available, uniqueJob(u, inRunning, reject))
			got := f.fetch(2).Jobs
			r := got[len(got)-1]
			require.Equal(t, inRunning, r.UniqueScope, "the job unique while running runs")
			requireHeld := func(when string) {
				t.Helper()
				_, reason := f.insertAs(batondriver.JobRejected, uniqueJob(u, c.scope, reject))
				require.Equal(t, "duplicate of "+h.ID, reason, "%s: the claim of %s", when, c.name)
			}
			requireHeld("while the job unique while running runs")
			f.complete(r)
			requireHeld("once it completed")
		})
	}

	// Twins unique while running under a key of limit 1 (as UniqueRunning
	// advises): the twin chained behind the running one takes the claim as
	// it starts. Put back unrun, it leaves the claim to the job ahead if
	// that one runs on (the chained twin given back first, say as a
	// lowered limit asks); else the claim ends with both.
	for _, way := range putBackWays {
		t.Run("ChainedTwinPutBack"+way, func(t *testing.T) {
			f := newJobFixture(t, newDriver)
			k := key("k")
			js := f.insertRes(keyJob(k, 1, uniq(u, inRunning, reject)), keyJob(k, 1, uniq(u, inRunning, reject))).Jobs
			got := f.fetchChain(1, chainTTL(way)).Jobs
			require.Equal(t, []string{js[0].ID, js[1].ID}, ids(got), "the holder, then the twin chained behind it")
			a, b := got[0], got[1]
			f.putBack(way, a, b)
			if way == "GiveBackChained" {
				f.requireState(running, a.ID)
				_, reason := f.insertAs(batondriver.JobRejected, uniqueJob(u, inRunning, reject))
				require.Equal(t, "duplicate of "+a.ID, reason, "the job ahead runs on")
				f.complete(a)
			}
			f.insertAs(batondriver.JobInserted, uniqueJob(u, inRunning, reject))
		})
	}

	t.Run("GiveBackClaimsAsQueued", func(t *testing.T) {
		// A job given back (JobFinish.GiveBack) is queued as if never
		// leased: unique while running, its claim ends, and a twin of
		// another scope takes the key; unique while queued, it takes its
		// claim back.
		f := newJobFixture(t, newDriver)
		a := f.runTwin(uniqueJob(u, inRunning, reject))
		require.Empty(t, f.finish(0, giveBack(a)))
		f.requireState(available, a.ID)
		f.requireKeyFree(u)
		f.complete(f.fetchOne(10 * time.Second))
		f.complete(f.fetchOne(10 * time.Second))

		c := f.runTwin(uniqueJob("c", queued, reject))
		require.Empty(t, f.finish(0, giveBack(c)))
		f.requireState(available, c.ID)
		_, reason := f.insertAs(batondriver.JobRejected, uniqueJob("c", queued, reject))
		require.Equal(t, "duplicate of "+c.ID, reason, "the job given back holds the key")
	})

	for _, o := range []batondriver.JobOutcome{batondriver.JobOutcomeRetry, batondriver.JobOutcomeSnooze, batondriver.JobOutcomeDead} {
		t.Run("LapsedPeriodNotTakenBackWhenQueuedAgain_"+string(o), func(t *testing.T) {
			// A period claim lasts its period from the insert: a job queued
			// again after it lapsed (retried, snoozed, or retried by an
			// admin once dead) claims nothing, so a twin of another scope
			// takes the key.
			f := newJobFixture(t, newDriver)
			const period = 50 * time.Millisecond
			r := f.runTwin(uniqueJob(u, inPeriod, reject, func(j *batondriver.JobInsert) { j.Unique.Period = period }))
			time.Sleep(2 * period)
			f.done(r, o, time.Now().Add(time.Hour))
			want := scheduled
			if o == batondriver.JobOutcomeDead {
				_, err := f.retry(r.ID)
				require.NoError(t, err)
				want = available
			}
			f.requireState(want, r.ID)
			f.requireKeyFree(u)
		})
	}

	t.Run("LapseOfPeriodClaimLeavesClaimOfAnotherScope", func(t *testing.T) {
		// A period claim lapses, swept by a fetch, without taking the
		// claim of a twin of another scope inserted meanwhile (here unique
		// while queued, which the period's running job does not conflict
		// with).
		f := newJobFixture(t, newDriver)
		const period = 50 * time.Millisecond
		f.runTwin(uniqueJob(u, inPeriod, reject, func(j *batondriver.JobInsert) { j.Unique.Period = period }))
		b := f.insertIn(scheduled, uniqueJob(u, queued, reject, runAtTime(time.Now().Add(time.Hour))))
		time.Sleep(2 * period)
		require.Empty(t, f.fetch(1).Jobs)
		_, reason := f.insertAs(batondriver.JobRejected, uniqueJob(u, queued, reject))
		require.Equal(t, "duplicate of "+b.ID, reason, "the queued job holds the key")
	})

	// Claims of different scopes live side by side: an insert that does
	// not conflict with a twin of another scope (its twin is not in the
	// states of the insert's scope) claims the key without taking the
	// twin's claim, which holds until its own job lets it go, against the
	// inserts whose scope meets it.
	t.Run("QueuedInsertLeavesRunningClaim", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		a := f.runTwin(uniqueJob(u, inRunning, reject))
		f.insertAs(batondriver.JobInserted, uniqueJob(u, queued, reject))
		_, reason := f.insertAs(batondriver.JobRejected, uniqueJob(u, inRunning, reject))
		require.Equal(t, "duplicate of "+a.ID, reason, "the running job's claim")
	})

	t.Run("QueuedTwinStartingLeavesUntilDoneClaim", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		a := f.runTwin(uniqueJob(u, untilDone, reject))
		b, _ := f.insertAs(batondriver.JobInserted, uniqueJob(u, queued, reject))
		require.Equal(t, b.ID, f.fetchOne(10*time.Second).ID)
		_, reason := f.insertAs(batondriver.JobRejected, uniqueJob(u, untilDone, reject))
		require.Equal(t, "duplicate of "+a.ID, reason, "the claim until done of the job still running")
		f.complete(a)
		f.insertAs(batondriver.JobInserted, uniqueJob(u, untilDone, reject))
	})

	t.Run("PeriodClaimOutlivesTwinOfAnotherScope", func(t *testing.T) {
		// A throttle's window is not ended by the run of a twin of another
		// scope inserted inside it.
		f := newJobFixture(t, newDriver)
		p := f.runTwin(uniqueJob(u, inPeriod, reject))
		f.complete(p)
		f.insertAs(batondriver.JobInserted, uniqueJob(u, queued, reject))
		f.complete(f.fetchOne(10 * time.Second))
		_, reason := f.insertAs(batondriver.JobRejected, uniqueJob(u, inPeriod, reject))
		require.Equal(t, "duplicate of "+p.ID, reason, "the period's claim")
	})

	t.Run("PeriodInsertConflictsWithRecentTwinOfAnyScope", func(t *testing.T) {
		// A period insert conflicts with a twin inserted less than its
		// period ago that holds a claim of any scope, though a period claim
		// made longer ago than that still lasts.
		f := newJobFixture(t, newDriver)
		f.complete(f.runTwin(uniqueJob(u, inPeriod, reject)))
		time.Sleep(100 * time.Millisecond)
		b := f.runTwin(uniqueJob(u, inRunning, reject))
		_, reason := f.insertAs(batondriver.JobRejected, uniqueJob(u, inPeriod, reject,
			func(j *batondriver.JobInsert) { j.Unique.Period = 50 * time.Millisecond }))
		require.Equal(t, "duplicate of "+b.ID, reason, "the running twin inserted inside the period")
	})

	t.Run("ReplacePrefersQueuedTwinOfAnyScope", func(t *testing.T) {
		// An insert that conflicts with a running twin and a queued one
		// (here a twin until done that runs, and a throttled twin inserted
		// once the period since the first one's insert had passed) gives
		// its args to the queued one.
		f := newJobFixture(t, newDriver)
		a := f.runTwin(uniqueJob(u, untilDone, reject))
		const period = time.Second
		time.Sleep(period + 100*time.Millisecond)
		p, _ := f.insertAs(batondriver.JobInserted, uniqueJob(u, inPeriod, reject,
			func(j *batondriver.JobInsert) { j.Unique.Period = period }))
		row, _ := f.insertAs(batondriver.JobReplaced, uniqueJob(u, untilDone, replace, args(`{"n":2}`)))
		f.requireTwin(row, p.ID, available, `{"n":2}`)
		f.requireState(running, a.ID)
	})

	t.Run("DeleteReleasesClaim", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		for _, scope := range []batondriver.UniqueScope{queued, untilDone} {
			a := f.insertIn(available, uniqueJob(u+string(scope), scope, reject))
			require.NoError(t, f.del(a.ID))
			b, _ := f.insertAs(batondriver.JobInserted, uniqueJob(u+string(scope), scope, reject))
			require.NoError(t, f.del(b.ID))
		}
		// A period's claim outlives its job.
		a := f.insertIn(available, uniqueJob(u, inPeriod, reject))
		require.NoError(t, f.del(a.ID))
		_, reason := f.insertAs(batondriver.JobRejected, uniqueJob(u, inPeriod, reject))
		require.Equal(t, "duplicate of "+a.ID, reason)

		// So does one whose job completed and was deleted at once.
		f.insertIn(available, uniqueJob("p2", inPeriod, reject))
		r := f.fetchOne(10 * time.Second)
		require.Empty(t, f.finish(0, outcome(r, batondriver.JobOutcomeCompleted, "", time.Time{})))
		f.requireGone(r.ID)
		_, reason = f.insertAs(batondriver.JobRejected, uniqueJob("p2", inPeriod, reject))
		require.Equal(t, "duplicate of "+r.ID, reason)
	})

	// A period's twin may be gone while its claim lasts: the insert that
	// conflicts with it still gets a row naming it (its ID, in its queue),
	// for every answer, so that a caller tells a duplicate from a busy key
	// (nil is only for OnBusyFail).
	t.Run("GoneTwinsRowNamesIt", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		a := f.insertIn(available, uniqueJob(u, inPeriod, existing))
		require.NoError(t, f.del(a.ID))
		for _, c := range []struct {
			answer batondriver.UniqueConflict
			want   batondriver.JobInsertStatus
		}{{"", batondriver.JobDuplicate}, {existing, batondriver.JobDuplicate},
			{replace, batondriver.JobDuplicate}, {reject, batondriver.JobRejected}} {
			row, _ := f.insertAs(c.want, uniqueJob(u, inPeriod, c.answer))
			require.NotNil(t, row, "answer %q: no row for the gone twin", c.answer)
			require.Equal(t, a.ID, row.ID, "answer %q", c.answer)
			require.Equal(t, f.queue, row.Queue, "answer %q", c.answer)
		}
		f.countsOf(nil)
	})

	t.Run("PeriodLapses", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		const period = 200 * time.Millisecond
		withPeriod := func(j *batondriver.JobInsert) { j.Unique.Period = period }
		start := time.Now()
		a, _ := f.insertAs(batondriver.JobInserted, uniqueJob(u, inPeriod, reject, withPeriod))
		var b *batondriver.JobRow
		f.eventually("period lapsed", func() bool {
			res := f.insertRes(uniqueJob(u, inPeriod, reject, withPeriod))
			if res.Status[0] == batondriver.JobRejected {
				require.Equal(t, "duplicate of "+a.ID, res.Reason[0])
				return false
			}
			require.Equal(t, batondriver.JobInserted, res.Status[0])
			b = res.Jobs[0]
			return true
		})
		require.GreaterOrEqual(t, time.Since(start), period-20*time.Millisecond, "the period lapsed early")
		f.countsOf(map[batondriver.JobState]int{available: 2})
		_, reason := f.insertAs(batondriver.JobRejected, uniqueJob(u, inPeriod, reject, withPeriod))
		require.Equal(t, "duplicate of "+b.ID, reason, "the new job claims a new period")
	})

	t.Run("LapsedPeriodClaimIsGone", func(t *testing.T) {
		// A period claim lapsed but not yet swept (no fetch since) is gone
		// for every scope: its job, still queued, is no twin.
		f := newJobFixture(t, newDriver)
		const period = 50 * time.Millisecond
		a := f.insertIn(scheduled, uniqueJob(u, inPeriod, reject, runAtTime(time.Now().Add(time.Hour)),
			func(j *batondriver.JobInsert) { j.Unique.Period = period }))
		time.Sleep(2 * period)
		b, _ := f.insertAs(batondriver.JobInserted, uniqueJob(u, queued, reject))
		require.NotEqual(t, a.ID, b.ID)
		_, reason := f.insertAs(batondriver.JobRejected, uniqueJob(u, queued, reject))
		require.Equal(t, "duplicate of "+b.ID, reason, "the new job claims the key")
	})

	t.Run("PeriodIsTheNewInserts", func(t *testing.T) {
		// A period insert conflicts with a twin inserted less than its own
		// Period ago while the twin's claim lasts, which is the twin's own
		// period: with two periods, the shorter counts.
		f := newJobFixture(t, newDriver)
		const short = 40 * time.Millisecond
		withShort := func(j *batondriver.JobInsert) { j.Unique.Period = short }
		a, _ := f.insertAs(batondriver.JobInserted, uniqueJob(u, inPeriod, reject)) // an hour
		_, reason := f.insertAs(batondriver.JobRejected, uniqueJob(u, inPeriod, reject, withShort))
		require.Equal(t, "duplicate of "+a.ID, reason, "a twin inserted just now")
		time.Sleep(2 * short)
		b, _ := f.insertAs(batondriver.JobInserted, uniqueJob(u, inPeriod, reject, withShort))
		require.NotEqual(t, a.ID, b.ID)
		// b claims the key for its own period; an hour's insert sees b
		// while that lasts, and claims nothing by conflicting, but not
		// after, though b was inserted less than an hour ago.
		_, reason = f.insertAs(batondriver.JobRejected, uniqueJob(u, inPeriod, reject))
		require.Equal(t, "duplicate of "+b.ID, reason)
		time.Sleep(2 * short)
		c, _ := f.insertAs(batondriver.JobInserted, uniqueJob(u, inPeriod, reject))
		_, reason = f.insertAs(batondriver.JobRejected, uniqueJob(u, inPeriod, reject, withShort))
		require.Equal(t, "duplicate of "+c.ID, reason)

		// So too with a twin of another scope: inserted less than the
		// period ago, counted from its insert.
		q, _ := f.insertAs(batondriver.JobInserted, uniqueJob("q", queued, reject))
		_, reason = f.insertAs(batondriver.JobRejected, uniqueJob("q", inPeriod, reject, withShort))
		require.Equal(t, "duplicate of "+q.ID, reason)
		time.Sleep(2 * short)
		f.insertAs(batondriver.JobInserted, uniqueJob("q", inPeriod, reject, withShort))
	})

	t.Run("PeriodCountsFromTwinsInsert", func(t *testing.T) {
		// Not from when the twin took its claim back (here by a snooze).
		f := newJobFixture(t, newDriver)
		const short = 40 * time.Millisecond
		withShort := func(j *batondriver.JobInsert) { j.Unique.Period = short }
		r := f.runTwin(uniqueJob("r", queued, existing))
		time.Sleep(2 * short)
		f.done(r, batondriver.JobOutcomeSnooze, time.Now().Add(time.Hour))
		row, _ := f.insertAs(batondriver.JobDuplicate, uniqueJob("r", queued, existing))
		require.Equal(t, r.ID, row.ID, "the snoozed job took its claim back")
		f.insertAs(batondriver.JobInserted, uniqueJob("r", inPeriod, reject, withShort))
	})

	recoveries := []struct {
		name     string
		scope    batondriver.UniqueScope
		attempts int
		conflict bool
	}{
		{"UntilDoneScheduled", untilDone, 3, true},
		{"UntilDoneDead", untilDone, 1, false},
		{"RunningScheduled", inRunning, 3, false},
		{"PeriodDead", inPeriod, 1, true},
	}
	for _, c := range recoveries {
		t.Run("ClaimAfterRecovery"+c.name, func(t *testing.T) {
			f := newJobFixture(t, newDriver)
			f.insertIn(available, uniqueJob(u, c.scope, reject, attempts(c.attempts)))
			a := f.fetchOne(50 * time.Millisecond)
			f.insertAs(batondriver.JobRejected, uniqueJob(u, c.scope, reject))
			f.recover(batondriver.JobFetchParams{Max: 1, LeaseTTL: 10 * time.Second, RecoverDelay: time.Hour})
			if c.conflict {
				_, reason := f.insertAs(batondriver.JobRejected, uniqueJob(u, c.scope, reject))
				require.Equal(t, "duplicate of "+a.ID, reason)
			} else {
				f.insertAs(batondriver.JobInserted, uniqueJob(u, c.scope, reject))
			}
		})
	}

	// An admin retry queues a dead, cancelled or dropped job again: unique
	// while queued or until done, it takes its claim back, so a twin
	// inserted after the retry resolves to it. A twin that took the claim
	// while the job was dead keeps it (the retry goes ahead: it is the
	// admin's call).
	for _, scope := range []batondriver.UniqueScope{queued, untilDone} {
		t.Run("RetryTakesClaimBack"+string(scope), func(t *testing.T) {
			f := newJobFixture(t, newDriver)
			r := f.runTwin(uniqueJob(u, scope, existing))
			f.done(r, batondriver.JobOutcomeDead, time.Time{})
			_, err := f.retry(r.ID)
			require.NoError(t, err)
			row, _ := f.insertAs(batondriver.JobDuplicate, uniqueJob(u, scope, existing))
			require.Equal(t, r.ID, row.ID, "the twin resolves to the retried job")
		})
		t.Run("RetryLeavesTwinsClaim"+string(scope), func(t *testing.T) {
			f := newJobFixture(t, newDriver)
			r := f.runTwin(uniqueJob(u, scope, existing))
			f.done(r, batondriver.JobOutcomeCancel, time.Time{})
			twin, _ := f.insertAs(batondriver.JobInserted, uniqueJob(u, scope, existing))
			_, err := f.retry(r.ID)
			require.NoError(t, err)
			row, _ := f.insertAs(batondriver.JobDuplicate, uniqueJob(u, scope, existing))
			require.Equal(t, twin.ID, row.ID, "the claim stays with the twin that took it")
		})
	}

	// A job unique while queued gave its claim up when it started; queued
	// again by a snooze or by its lease taken back, it takes the claim back
	// (a retry is in the table above), unless a twin took it meanwhile.
	t.Run("QueuedScopeReclaimsOnSnooze", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		r := f.runTwin(uniqueJob(u, queued, existing))
		f.done(r, batondriver.JobOutcomeSnooze, time.Now().Add(time.Hour))
		row, _ := f.insertAs(batondriver.JobDuplicate, uniqueJob(u, queued, existing))
		require.Equal(t, r.ID, row.ID)
	})
	t.Run("QueuedScopeReclaimsOnRecovery", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		r := f.insertIn(available, uniqueJob(u, queued, existing))
		require.Equal(t, r.ID, f.fetchOne(50*time.Millisecond).ID)
		require.Equal(t, 1, f.recover(batondriver.JobFetchParams{LeaseTTL: 10 * time.Second, RecoverDelay: time.Hour}).Recovered)
		row, _ := f.insertAs(batondriver.JobDuplicate, uniqueJob(u, queued, existing))
		require.Equal(t, r.ID, row.ID)
	})
	t.Run("QueuedScopeSnoozeLeavesTwinsClaim", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		r := f.runTwin(uniqueJob(u, queued, existing))
		twin, _ := f.insertAs(batondriver.JobInserted, uniqueJob(u, queued, existing))
		f.done(r, batondriver.JobOutcomeSnooze, time.Now().Add(time.Hour))
		row, _ := f.insertAs(batondriver.JobDuplicate, uniqueJob(u, queued, existing))
		require.Equal(t, twin.ID, row.ID, "the claim stays with the twin that took it")
	})

	t.Run("AgainKeepsUniqueKey", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		a := f.insertIn(available, uniqueJob(u, untilDone, existing))
		r := f.fetchOne(10 * time.Second)
		f.done(r, batondriver.JobOutcomeRetry, time.Time{})
		r = f.fetchOne(10 * time.Second)
		require.Equal(t, 2, r.Attempt)
		require.Empty(t, f.finish(0, outcome(r, batondriver.JobOutcomeAgain, "", time.Time{})))
		g := f.get(a.ID)
		require.Equal(t, available, g.State)
		require.Equal(t, 1, g.Runs)
		require.Zero(t, g.Attempt, "a new run starts with its attempts reset")
		require.Len(t, g.Errors, 1, "errors are kept across runs")
		require.True(t, g.FinishedAt.IsZero())
		require.Equal(t, u, g.Unique)
		require.Equal(t, untilDone, g.UniqueScope)

		row, _ := f.insertAs(batondriver.JobDuplicate, uniqueJob(u, untilDone, existing))
		require.Equal(t, a.ID, row.ID)
		r = f.fetchOne(10 * time.Second)
		require.Equal(t, a.ID, r.ID)
		require.Equal(t, 1, r.Attempt)
		require.Equal(t, 1, r.Runs)
		row, _ = f.insertAs(batondriver.JobDuplicate, uniqueJob(u, untilDone, existing))
		require.Equal(t, a.ID, row.ID)

		// Again later: scheduled, still claimed.
		require.Empty(t, f.finish(0, outcome(r, batondriver.JobOutcomeAgain, "", time.Now().Add(time.Hour))))
		g = f.get(a.ID)
		require.Equal(t, scheduled, g.State)
		require.Equal(t, 2, g.Runs)
		requireNear(t, time.Now().Add(time.Hour), g.RunAt, clockSlack)
		row, _ = f.insertAs(batondriver.JobDuplicate, uniqueJob(u, untilDone, existing))
		require.Equal(t, a.ID, row.ID)
	})

	t.Run("AgainQueuedReclaims", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		a := f.insertIn(available, uniqueJob(u, queued, existing))
		r := f.fetchOne(10 * time.Second)
		require.Empty(t, f.finish(0, outcome(r, batondriver.JobOutcomeAgain, "", time.Time{})))
		f.requireState(available, a.ID)
		row, _ := f.insertAs(batondriver.JobDuplicate, uniqueJob(u, queued, existing))
		require.Equal(t, a.ID, row.ID, "the next run is queued: it holds the claim")
	})

	t.Run("AgainQueuedTwinIsTheNextRun", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		for _, retention := range []time.Duration{time.Hour, 0} {
			u := u + retention.String()
			f.insertIn(available, uniqueJob(u, queued, existing))
			r := f.fetchOne(10 * time.Second)
			b, _ := f.insertAs(batondriver.JobInserted, uniqueJob(u, queued, existing)) // r runs: no conflict
			require.Empty(t, f.finish(retention, outcome(r, batondriver.JobOutcomeAgain, "", time.Time{})))
			if retention == 0 {
				f.requireGone(r.ID)
			} else {
				g := f.get(r.ID)
				require.Equal(t, completed, g.State, "a second run was queued beside its twin")
				requireNear(t, time.Now(), g.FinishedAt, clockSlack)
			}
			f.requireState(available, b.ID)
			row, _ := f.insertAs(batondriver.JobDuplicate, uniqueJob(u, queued, existing))
			require.Equal(t, b.ID, row.ID)
			got := f.fetchOne(10 * time.Second)
			require.Equal(t, b.ID, got.ID)
			f.complete(got)
		}
		f.countsOf(map[batondriver.JobState]int{completed: 3})
	})

	t.Run("AgainQueuedTwinParked", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a := f.hold(k, 1, 10*time.Second, uniq(u, queued, existing))
		b := f.insertIn(parked, keyJob(k, 1, uniq(u, queued, existing)))
		require.Empty(t, f.finish(time.Hour, outcome(a, batondriver.JobOutcomeAgain, "", time.Time{})))
		f.requireState(completed, a.ID)
		f.requireKey(k, []string{b.ID}, 0, 0)
	})

	t.Run("AgainBesideQueuedTwinOfAnotherScope", func(t *testing.T) {
		// Only a job unique while queued takes a queued twin for its next
		// run: one unique while running that runs again is queued beside
		// the twin of another scope that took the key while it ran.
		f := newJobFixture(t, newDriver)
		a := f.runTwin(uniqueJob(u, inRunning, reject))
		b, _ := f.insertAs(batondriver.JobInserted, uniqueJob(u, queued, reject))
		require.Empty(t, f.finish(time.Hour, outcome(a, batondriver.JobOutcomeAgain, "", time.Time{})))
		f.requireState(available, a.ID, b.ID)
	})

	t.Run("AgainTakesSlotBack", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a := f.hold(k, 1, 10*time.Second, onBusy(batondriver.OnBusyDrop), uniq(u, untilDone, existing))
		require.Empty(t, f.finish(0, outcome(a, batondriver.JobOutcomeAgain, "", time.Time{})))
		// Nothing was parked: the next run has the slot again, and no twin
		// slipped in.
		f.requireState(available, a.ID)
		f.requireKey(k, []string{a.ID}, 0, 0)
		f.insertIn(dropped, keyJob(k, 1, onBusy(batondriver.OnBusyDrop)))
		row, _ := f.insertAs(batondriver.JobDuplicate, keyJob(k, 1, onBusy(batondriver.OnBusyDrop), uniq(u, untilDone, existing)))
		require.Equal(t, a.ID, row.ID)
		f.requireKey(k, []string{a.ID}, 0, 0)
	})

	t.Run("AgainReleasesRunningClaim", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		a := f.runTwin(uniqueJob(u, inRunning, reject))
		f.insertAs(batondriver.JobRejected, uniqueJob(u, inRunning, reject))
		require.Empty(t, f.finish(0, outcome(a, batondriver.JobOutcomeAgain, "", time.Time{})))
		f.requireState(available, a.ID)
		f.insertAs(batondriver.JobInserted, uniqueJob(u, inRunning, reject))
	})

	t.Run("BadParams", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		insert := func(name string, set func(j *batondriver.JobUnique)) {
			t.Helper()
			j := uniqueJob(u, untilDone, existing)
			set(j.Unique)
			_, err := f.d.JobInsert(f.ctx, &batondriver.JobInsertParams{Queue: f.queue, Jobs: []*batondriver.JobInsert{newJob(), j}})
			require.ErrorIs(t, err, batondriver.ErrBadParams, name)
		}
		insert("empty key", func(j *batondriver.JobUnique) { j.Key = "" })
		insert("key too long", func(j *batondriver.JobUnique) { j.Key = strings.Repeat("u", batondriver.MaxKeyLen+1) })
		insert("unknown scope", func(j *batondriver.JobUnique) { j.Scope = "forever" })
		insert("period without period", func(j *batondriver.JobUnique) { j.Scope = inPeriod })
		insert("period under 1ms", func(j *batondriver.JobUnique) { j.Scope, j.Period = inPeriod, time.Millisecond-1 })
		insert("unknown answer", func(j *batondriver.JobUnique) { j.OnConflict = "merge" })
		f.countsOf(nil)

		// The longest key, the default answer, and a period other scopes
		// ignore are fine.
		row, _ := f.insertAs(batondriver.JobInserted, uniqueJob(strings.Repeat("u", batondriver.MaxKeyLen), untilDone, ""))
		f.insertAs(batondriver.JobInserted, uniqueJob(u, queued, "", func(j *batondriver.JobInsert) { j.Unique.Period = time.Microsecond }))
		dup, _ := f.insertAs(batondriver.JobDuplicate, uniqueJob(strings.Repeat("u", batondriver.MaxKeyLen), untilDone, ""))
		require.Equal(t, row.ID, dup.ID)
	})
}
