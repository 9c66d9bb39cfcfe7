package batondrivertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
)

// listen starts a QueueListen listener of the fixture's queue, closed at the
// test's end.
func (f *jobFixture) listen() batondriver.QueueListener {
	f.t.Helper()
	return f.listenTo(f.queue)
}

func (f *jobFixture) listenTo(queue string) batondriver.QueueListener {
	f.t.Helper()
	l, err := f.d.QueueListen(f.ctx, &batondriver.QueueParams{Queue: queue})
	require.NoError(f.t, err)
	f.t.Cleanup(l.Close)
	return l
}

// noticed waits for l's next notice and requires it to be want.
func noticed(t *testing.T, l batondriver.QueueListener, want batondriver.QueueNotice) {
	t.Helper()
	select {
	case n := <-l.C():
		require.Equal(t, want, n)
	case <-time.After(5 * time.Second):
		t.Fatalf("no notice %+v", want)
	}
}

// noRecall requires that l holds no notice for a while. Only a test's last
// check: the earlier ones are made by a later notice that must come first.
func quiet(t *testing.T, l batondriver.QueueListener) {
	t.Helper()
	select {
	case n := <-l.C():
		t.Fatalf("unexpected notice %+v", n)
	case <-time.After(100 * time.Millisecond):
	}
}

// exerciseNotices checks QueueListen: a change of limit that leaves a key's
// chained jobs (JobFetchParams.Chain) beyond its limit tells the queue's
// listeners, and a change that leaves them within it does not; a cancel of
// a running job tells them its ID.
func exerciseNotices(t *testing.T, newDriver func(t *testing.T) batondriver.JobDriver) {
	t.Run("HaltRecallsChained", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		l1, l2 := f.listen(), f.listen()
		other := f.listenTo(uniqueQueue())
		k := key("k")
		a, b, c := f.chain(k, 10*time.Second)
		// The limit it has: b takes over a's slot within it.
		f.setLimit(k, 1)
		f.setLimit(k, 2)
		// Halted: b would run beyond the limit. Every listener of the
		// queue hears it, first: the changes above sent nothing.
		info := f.setLimit(k, 0)
		require.Equal(t, b.Fence, info.Fence)
		want := batondriver.QueueNotice{Key: k, Fence: b.Fence}
		noticed(t, l1, want)
		noticed(t, l2, want)
		// The backend changes nothing itself; the client gives b back, to
		// the head of the parked jobs.
		f.requireChained(k, map[string]string{a.ID: b.ID})
		require.Empty(t, f.finish(time.Hour, giveBack(b)))
		f.requireUnchained(b.ID, parked)
		require.Equal(t, []string{b.ID, c.ID}, ids(f.list(parked, 10, 0).Jobs))
		f.requireKey(k, []string{a.ID}, 1, 2)
		// With nothing chained, a halt again recalls nothing.
		f.setLimit(k, 1)
		f.setLimit(k, 0)
		quiet(t, l1)
		quiet(t, other)
	})

	t.Run("LoweredLimitRecallsChained", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		l := f.listen()
		k := key("k")
		js := f.insertRes(keyJob(k, 2), keyJob(k, 2), keyJob(k, 2), keyJob(k, 2), keyJob(k, 2)).Jobs
		got := f.fetchChain(2, 10*time.Second).Jobs
		require.Len(t, got, 4, "two holders, a job chained behind each")
		// Removing an override that matches the default, and raising the
		// limit, leave both chains within it.
		f.setLimit(k, 2)
		f.resetLimit(k)
		f.setLimit(k, 5)
		f.requireChained(k, map[string]string{got[2].After: got[2].ID, got[3].After: got[3].ID})
		// Down to 1 with two running holders: each chained job would
		// keep the key at two.
		info := f.setLimit(k, 1)
		require.Equal(t, 2, info.Holding)
		noticed(t, l, batondriver.QueueNotice{Key: k, Fence: max(got[2].Fence, got[3].Fence)})
		// Back to 2: within it again, nothing more.
		f.setLimit(k, 2)
		f.resetLimit(k)
		f.requireState(parked, js[4].ID)
		quiet(t, l)
	})

	t.Run("ResetRecallsChainedOverItsOwnDefault", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		l := f.listen()
		k := key("k")
		f.setLimit(k, 2)
		js := f.insertRes(keyJob(k, 1), keyJob(k, 1), keyJob(k, 1)).Jobs
		got := f.fetchChain(2, 10*time.Second).Jobs
		require.Equal(t, []string{js[0].ID, js[1].ID, js[2].ID}, ids(got), "two run under the override, the third chained")
		// A job of a larger default: the key's latest, parked.
		d := f.insertOne(keyJob(k, 3))
		f.requireState(parked, d.ID)
		// Without the override, d's default admits it beside the two
		// holders, but the chained job's own default, 1, admits it
		// nowhere near three holders: recalled.
		info := f.resetLimit(k)
		require.Equal(t, 3, info.Holding)
		noticed(t, l, batondriver.QueueNotice{Key: k, Fence: info.Fence})
	})

	t.Run("ListenRefusesBadQueue", func(t *testing.T) {
		t.Parallel()
		d := newDriver(t)
		_, err := d.QueueListen(t.Context(), &batondriver.QueueParams{Queue: "bad queue"})
		require.ErrorIs(t, err, batondriver.ErrBadParams)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err = d.QueueListen(ctx, &batondriver.QueueParams{Queue: uniqueQueue()})
		require.True(t, errors.Is(err, context.Canceled), "an ended context: %v", err)
	})

	t.Run("ClosedListenerHearsNothing", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		closed, open := f.listen(), f.listen()
		closed.Close()
		closed.Close()
		k := key("k")
		_, b, _ := f.chain(k, 10*time.Second)
		f.setLimit(k, 0)
		noticed(t, open, batondriver.QueueNotice{Key: k, Fence: b.Fence})
		quiet(t, closed)
	})
	t.Run("CancelOfRunningJobTells", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		l := f.listen()
		k := key("k")
		js := f.insertRes(newJob(), keyJob(k, 1), keyJob(k, 1), keyJob(k, 1)).Jobs
		got := f.fetchChain(2, 10*time.Second).Jobs
		require.Equal(t, []string{js[0].ID, js[1].ID, js[2].ID}, ids(got), "two running, one chained")
		// A queued job ends at once: nobody needs telling.
		_, err := f.cancel(js[3].ID)
		require.NoError(t, err)
		// A running one, and a chained one, are told by ID, first: the
		// cancel above sent nothing. A second request tells again.
		for _, id := range []string{js[0].ID, js[2].ID, js[0].ID} {
			_, err := f.cancel(id)
			require.NoError(t, err)
			noticed(t, l, batondriver.QueueNotice{Cancel: id})
		}
		quiet(t, l)
	})
}
