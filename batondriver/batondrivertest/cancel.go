package batondrivertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
)

// cancelReason is the reason the cancel tests give.
const cancelReason = "cancelled by the test"

// cancel asks the backend to cancel job id, with cancelReason.
func (f *jobFixture) cancel(id string) (*batondriver.JobRow, error) {
	return f.d.JobCancel(f.ctx, &batondriver.JobCancelParams{Queue: f.queue, ID: id, Reason: cancelReason})
}

// requireCancel cancels job id, requires it done, and returns the job as
// the call left it.
func (f *jobFixture) requireCancel(id string) *batondriver.JobRow {
	f.t.Helper()
	row, err := f.cancel(id)
	require.NoError(f.t, err)
	require.Equal(f.t, id, row.ID)
	require.Equal(f.t, f.queue, row.Queue)
	return row
}

// requireCancelled asserts that job id ended cancelled, its last error the
// cancel's reason followed by msg (batondriver.CancelledError), its cancel
// request cleared, listed in the cancelled part of the dead set; and
// returns it.
func (f *jobFixture) requireCancelled(id, msg string) *batondriver.JobRow {
	f.t.Helper()
	g := f.get(id)
	require.Equal(f.t, cancelled, g.State, "state of %s", id)
	require.NotEmpty(f.t, g.Errors, "no error recorded")
	require.Equal(f.t, batondriver.CancelledError(cancelReason, msg), g.Errors[len(g.Errors)-1].Error)
	requireNear(f.t, time.Now(), g.FinishedAt, clockSlack)
	require.True(f.t, g.CancelRequestedAt.IsZero(), "a cancelled job keeps no cancel request")
	require.Empty(f.t, g.Lease)
	require.Empty(f.t, g.After)
	require.Contains(f.t, ids(f.list(cancelled, 1000, 0).Jobs), id, "listed among the cancelled jobs")
	return g
}

// requireCancelRequested asserts that the running job row has a cancel
// request, made about now.
func requireCancelRequested(t *testing.T, row *batondriver.JobRow) {
	t.Helper()
	require.Equal(t, running, row.State)
	requireNear(t, time.Now(), row.CancelRequestedAt, clockSlack)
}

// exerciseCancel checks JobCancel: a queued job cancelled at once, its key
// slot or parked place freed and its unique claim released; a running job
// asked to stop through JobExtend and ended cancelled by whatever ends its
// attempt but a completion, a job chained behind it not lost; ended jobs
// refused.
func exerciseCancel(t *testing.T, newDriver func(t *testing.T) batondriver.JobDriver) {
	t.Run("Queued", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		avail := f.insertIn(available, newJob())
		sched := f.insertIn(scheduled, withJob(func(j *batondriver.JobInsert) { j.RunAt = time.Now().Add(time.Hour) }))
		for _, id := range []string{avail.ID, sched.ID} {
			row := f.requireCancel(id)
			require.Equal(t, cancelled, row.State, "the call's row")
			g := f.requireCancelled(id, "")
			require.Zero(t, g.Attempt)
			require.Len(t, g.Errors, 1)
			require.Zero(t, g.Errors[0].Attempt)
		}
		res := f.fetch(10)
		require.Empty(t, res.Jobs, "a cancelled job was fetched")
		require.True(t, res.NextRunAt.IsZero(), "a cancelled job is still scheduled")
		f.counts(0, 0, 0, 0, 2, 0)

		// A retry runs it again: the cancel was for then.
		_, err := f.retry(avail.ID)
		require.NoError(t, err)
		r := f.fetchOne(10 * time.Second)
		require.Equal(t, avail.ID, r.ID)
		require.True(t, r.CancelRequestedAt.IsZero())
		require.Empty(t, f.extend(time.Minute, lease(r)).CancelRequested)
	})

	// A job scheduled for its retry keeps its errors and attempts; the
	// cancel's reason is recorded for the last attempt.
	t.Run("ScheduledRetry", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.insertOne(newJob())
		r := f.fetchOne(10 * time.Second)
		f.done(r, batondriver.JobOutcomeRetry, time.Now().Add(time.Hour))
		f.requireCancel(r.ID)
		g := f.requireCancelled(r.ID, "")
		require.Equal(t, 1, g.Attempt)
		require.Len(t, g.Errors, 2)
		require.Equal(t, "x", g.Errors[0].Error)
		require.Equal(t, 1, g.Errors[1].Attempt)
	})

	// A holder's slot goes to the next parked job in the same step, which
	// wakes a fetcher; a parked job leaves its key's parked jobs.
	t.Run("QueuedKeyed", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a := f.insertIn(available, keyJob(k, 1))
		b := f.insertIn(parked, keyJob(k, 1))
		c := f.insertIn(parked, keyJob(k, 1))
		d := f.insertIn(parked, keyJob(k, 1))

		f.requireCancel(c.ID)
		f.requireCancelled(c.ID, "")
		f.requireKey(k, []string{a.ID}, 0, 2)
		f.requireWakes("a cancelled holder's promotion", func() { f.requireCancel(a.ID) })
		f.requireCancelled(a.ID, "")
		f.requireState(available, b.ID)
		f.requireKey(k, []string{b.ID}, 0, 1)
		f.cycle(b.ID, d.ID)
		f.requireIdle(k)
		f.countsOf(map[batondriver.JobState]int{cancelled: 2, completed: 2})
	})

	// A cancelled parked head lets the next job in, as its own larger
	// default admits it beside the holder (mixed defaults).
	t.Run("ParkedHeadPromotesNext", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a := f.insertIn(available, keyJob(k, 1))
		c := f.insertIn(parked, keyJob(k, 1))
		d := f.insertIn(parked, keyJob(k, 3))
		f.requireCancel(c.ID)
		f.requireState(available, d.ID)
		f.requireKey(k, []string{a.ID, d.ID}, 0, 0)
	})

	t.Run("Refused", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		f.insert(newJob(), newJob(), newJob())
		var ended []string
		for _, o := range []batondriver.JobOutcome{batondriver.JobOutcomeCompleted, batondriver.JobOutcomeCancel, batondriver.JobOutcomeDead} {
			r := f.fetchOne(10 * time.Second)
			f.done(r, o, time.Time{})
			ended = append(ended, r.ID)
		}
		f.hold(k, 1, 10*time.Second)
		ended = append(ended, f.insertIn(dropped, keyJob(k, 1, onBusy(batondriver.OnBusyDrop))).ID)
		for i, want := range []batondriver.JobState{completed, cancelled, dead, dropped} {
			before := f.get(ended[i])
			_, err := f.cancel(ended[i])
			require.ErrorIs(t, err, batondriver.ErrBadParams, "a %s job was cancelled", want)
			require.ErrorContains(t, err, string(want))
			g := f.get(ended[i])
			require.Equal(t, want, g.State)
			require.Equal(t, before.Errors, g.Errors, "a refused cancel records nothing")
			require.True(t, g.CancelRequestedAt.IsZero())
		}
		_, err := f.cancel(unknownID)
		require.ErrorIs(t, err, batondriver.ErrJobNotFound)
	})

	// A running job is asked to stop: the request is stored with it and
	// reported by every renewal of its lease, which goes on; its attempt's
	// failure then ends it cancelled, not retried, its slot freed.
	t.Run("Running", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		r := f.hold(k, 1, 10*time.Second)
		p := f.insertIn(parked, keyJob(k, 1))
		other := f.insertIn(available, newJob())
		o := f.fetchOne(10 * time.Second)
		require.Equal(t, other.ID, o.ID)

		row := f.requireCancel(r.ID)
		requireCancelRequested(t, row)
		require.Equal(t, r.Lease, row.Lease)
		g := f.get(r.ID)
		requireCancelRequested(t, g)
		require.Empty(t, g.Errors, "nothing recorded before the attempt ends")
		// A second request keeps the first.
		time.Sleep(2 * time.Millisecond)
		require.True(t, row.CancelRequestedAt.Equal(f.requireCancel(r.ID).CancelRequestedAt))

		res := f.extend(time.Minute, lease(r), lease(o))
		require.Empty(t, res.Lost)
		require.Equal(t, []string{r.ID}, res.CancelRequested, "the renewal reports the request, for that job alone")
		requireNear(t, res.Now.Add(time.Minute), f.get(r.ID).LeaseUntil, storeSlack, "the lease renewed")
		f.requireKey(k, []string{r.ID}, 1, 1)

		fin := outcome(r, batondriver.JobOutcomeRetry, "context canceled", time.Time{})
		require.Empty(t, f.finish(time.Hour, fin))
		g = f.requireCancelled(r.ID, "context canceled")
		require.Equal(t, 1, g.Attempt)
		require.Len(t, g.Errors, 1)
		require.Equal(t, 1, g.Errors[0].Attempt)
		f.requireState(available, p.ID)
		f.requireKey(k, []string{p.ID}, 0, 0)
		require.Empty(t, f.extend(time.Minute, lease(o)).CancelRequested)
	})

	// Whatever ends the attempt of a job whose cancel was requested ends it
	// cancelled, the outcome's error after the reason — but a completion,
	// which stands: the handler finished before it noticed.
	for _, o := range []struct {
		name    string
		fin     func(r *batondriver.JobRow) *batondriver.JobFinish
		msg     string
		state   batondriver.JobState
		attempt int // the job's Attempt after it
	}{
		{"Completed", func(r *batondriver.JobRow) *batondriver.JobFinish {
			return outcome(r, batondriver.JobOutcomeCompleted, "", time.Time{})
		}, "", completed, 1},
		{"RetryLater", func(r *batondriver.JobRow) *batondriver.JobFinish {
			return outcome(r, batondriver.JobOutcomeRetry, "boom", time.Now().Add(time.Hour))
		}, "boom", cancelled, 1},
		{"Snooze", func(r *batondriver.JobRow) *batondriver.JobFinish {
			return outcome(r, batondriver.JobOutcomeSnooze, "", time.Time{})
		}, "", cancelled, 1},
		{"Again", func(r *batondriver.JobRow) *batondriver.JobFinish {
			return outcome(r, batondriver.JobOutcomeAgain, "", time.Time{})
		}, "", cancelled, 1},
		// An Again's own error follows the reason as any outcome's does,
		// its output (JobFinish.Output) neither stored nor taken for it.
		{"AgainWithErrorAndOutput", func(r *batondriver.JobRow) *batondriver.JobFinish {
			fin := outcome(r, batondriver.JobOutcomeAgain, "why", time.Time{})
			fin.Output = []byte(`"out"`)
			return fin
		}, "why", cancelled, 1},
		{"Cancel", func(r *batondriver.JobRow) *batondriver.JobFinish {
			return outcome(r, batondriver.JobOutcomeCancel, "stopped", time.Time{})
		}, "stopped", cancelled, 1},
		{"Dead", func(r *batondriver.JobRow) *batondriver.JobFinish {
			return outcome(r, batondriver.JobOutcomeDead, "bad args", time.Time{})
		}, "bad args", cancelled, 1},
		// A give-back counts no attempt, cancelled as given back.
		{"GiveBack", giveBack, "", cancelled, 0},
	} {
		t.Run("RunningOutcome"+o.name, func(t *testing.T) {
			f := newJobFixture(t, newDriver)
			k := key("k")
			u := uniqueKey(t)
			r := f.hold(k, 1, 10*time.Second, uniq(u, untilDone, reject))
			p := f.insertIn(parked, keyJob(k, 1))
			f.requireCancel(r.ID)
			require.Empty(t, f.finish(time.Hour, o.fin(r)))
			var g *batondriver.JobRow
			if o.state == completed {
				g = f.get(r.ID)
				require.Equal(t, completed, g.State)
				requireNear(t, time.Now(), g.CancelRequestedAt, clockSlack, "the request shown, too late")
			} else {
				g = f.requireCancelled(r.ID, o.msg)
				require.Len(t, g.Errors, 1)
				require.Equal(t, o.attempt, g.Errors[0].Attempt)
			}
			require.Equal(t, o.attempt, g.Attempt)
			require.Nil(t, g.Output, "an outcome the cancel request turns stores no output")
			f.requireState(available, p.ID)
			f.requireKey(k, []string{p.ID}, 0, 0)
			f.requireKeyFree(u)
			f.countsOf(map[batondriver.JobState]int{o.state: 1, available: 2})
		})
	}

	// A job whose worker died is not run again: its lease's expiry takes
	// it back cancelled, attempts left or not, its slot freed.
	t.Run("RunningLeaseExpired", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		r := f.hold(k, 1, 50*time.Millisecond, uniq(uniqueKey(t), inRunning, reject))
		p := f.insertIn(parked, keyJob(k, 1))
		f.requireCancel(r.ID)
		res := f.recover(batondriver.JobFetchParams{LeaseTTL: 10 * time.Second})
		require.Equal(t, 1, res.Recovered)
		g := f.requireCancelled(r.ID, "lease expired")
		require.Equal(t, 1, g.Attempt)
		require.True(t, res.NextRunAt.IsZero(), "not scheduled to run again")
		f.requireState(available, p.ID)
		f.requireKeyFree(r.Unique)
		f.countsOf(map[batondriver.JobState]int{cancelled: 1, available: 2})
	})

	// The job chained behind a job whose cancel was requested is not lost:
	// it takes over the slot when that job's attempt ends, or, given back
	// with it, goes back to the head of the parked jobs and is promoted.
	t.Run("RunningChainedBehindTakesOver", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a, b, c := f.chain(k, 10*time.Second)
		f.requireCancel(a.ID)
		require.Empty(t, f.extend(time.Minute, lease(b)).CancelRequested, "only a's cancel was requested")
		f.done(a, batondriver.JobOutcomeRetry, time.Time{})
		f.requireCancelled(a.ID, "x")
		g := f.get(b.ID)
		require.Equal(t, running, g.State)
		require.Empty(t, g.After, "b took a's slot")
		f.requireKey(k, []string{b.ID}, 1, 1)
		f.requireState(parked, c.ID)
		f.complete(g)
		f.requireState(available, c.ID)
	})
	t.Run("RunningGivenBackChainedBehindPromoted", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a, b, c := f.chain(k, 10*time.Second)
		f.requireCancel(a.ID)
		require.Empty(t, f.finish(time.Hour, giveBack(a)))
		g := f.requireCancelled(a.ID, "")
		require.Zero(t, g.Attempt, "a give-back counts no attempt")
		f.requireUnchained(b.ID, available)
		f.requireKey(k, []string{b.ID}, 0, 1)
		f.cycle(b.ID, c.ID)
	})

	// A chained job whose cancel was requested and that goes back unrun
	// (every way a chained job goes back) ends cancelled instead of
	// waiting to run, its attempt not counted; the next parked job takes
	// the slot of the job ahead if that freed it.
	for _, way := range putBackWays {
		t.Run("ChainedPutBack"+way, func(t *testing.T) {
			f := newJobFixture(t, newDriver)
			k := key("k")
			a, b, c := f.chain(k, chainTTL(way))
			requireCancelRequested(t, f.requireCancel(b.ID))
			f.putBack(way, a, b)
			g := f.requireCancelled(b.ID, "")
			require.Zero(t, g.Attempt, "the chained attempt is not counted")
			require.True(t, g.AttemptedAt.IsZero())
			switch way {
			case "GiveBackChained": // a runs on
				f.requireKey(k, []string{a.ID}, 1, 1)
				f.requireState(parked, c.ID)
			case "GiveBackAhead": // a keeps its slot, available again
				f.requireKey(k, []string{a.ID}, 0, 1)
				f.requireState(parked, c.ID)
			default: // a's outcome or expiry freed its slot
				f.requireState(available, c.ID)
				f.requireKey(k, []string{c.ID}, 0, 0)
			}
		})
	}

	// A chained job that runs on once the job ahead's outcome is recorded
	// is told of its cancel at its renewals, as any running job.
	t.Run("ChainedRuns", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		k := key("k")
		a, b, _ := f.chain(k, 10*time.Second)
		f.requireCancel(b.ID)
		f.complete(a)
		require.Equal(t, []string{b.ID}, f.extend(time.Minute, lease(b)).CancelRequested)
		f.done(b, batondriver.JobOutcomeRetry, time.Time{})
		f.requireCancelled(b.ID, "x")
	})

	// A queued job's unique claim ends as a cancelled job's does; a
	// period's claim lasts its period.
	t.Run("UniqueClaims", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		u := uniqueKey(t)
		for _, scope := range []batondriver.UniqueScope{queued, untilDone} {
			a := f.insertIn(available, uniqueJob(u+string(scope), scope, reject))
			f.requireCancel(a.ID)
			f.requireKeyFree(u + string(scope))
		}
		p := f.insertIn(available, uniqueJob(u, inPeriod, reject))
		f.requireCancel(p.ID)
		_, reason := f.insertAs(batondriver.JobRejected, uniqueJob(u, inPeriod, reject))
		require.Equal(t, "duplicate of "+p.ID, reason)
	})

	t.Run("BadParams", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		r := f.insertIn(available, newJob())
		for name, p := range map[string]batondriver.JobCancelParams{
			"empty queue":  {ID: r.ID, Reason: cancelReason},
			"bad queue":    {Queue: "a queue", ID: r.ID, Reason: cancelReason},
			"empty ID":     {Queue: f.queue, Reason: cancelReason},
			"empty reason": {Queue: f.queue, ID: r.ID},
		} {
			_, err := f.d.JobCancel(f.ctx, &p)
			require.ErrorIs(t, err, batondriver.ErrBadParams, name)
		}
		f.requireState(available, r.ID)
	})
}
