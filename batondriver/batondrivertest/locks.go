package batondrivertest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
)

// lockFixture is one test's driver and key with helpers around them.
type lockFixture struct {
	t   *testing.T
	d   batondriver.LockDriver
	ctx context.Context
	key string
}

func newLockFixture(t *testing.T, newDriver func(t *testing.T) batondriver.LockDriver) *lockFixture {
	t.Parallel()
	return &lockFixture{t: t, d: newDriver(t), ctx: context.Background(), key: uniqueKey(t)}
}

// try makes a non-waiting attempt with limit and TTL.
func (f *lockFixture) try(tok string, limit int, ttl time.Duration) *batondriver.LockAcquireResult {
	f.t.Helper()
	res, err := f.d.LockAcquire(f.ctx, &batondriver.LockAcquireParams{Key: f.key, Token: tok, Limit: limit, TTL: ttl})
	require.NoError(f.t, err)
	return res
}

// grant takes a slot and fails the test if it is not granted.
func (f *lockFixture) grant(tok string, limit int) *batondriver.LockAcquireResult {
	f.t.Helper()
	res := f.try(tok, limit, 10*time.Second)
	require.True(f.t, res.Granted, "slot for %s not granted", tok)
	require.NotZero(f.t, res.Fence)
	return res
}

// wait queues tok (listening first) and returns its listener.
func (f *lockFixture) wait(tok string, limit int, waitTTL time.Duration) (batondriver.LockListener, *batondriver.LockAcquireResult) {
	f.t.Helper()
	lis, err := f.d.LockListen(f.ctx, &batondriver.LockListenParams{Key: f.key, Token: tok})
	require.NoError(f.t, err)
	f.t.Cleanup(lis.Close)
	res, err := f.d.LockAcquire(f.ctx, &batondriver.LockAcquireParams{
		Key: f.key, Token: tok, Limit: limit, TTL: 10 * time.Second, Wait: true, WaitTTL: waitTTL,
	})
	require.NoError(f.t, err)
	return lis, res
}

func (f *lockFixture) release(tok string, fence uint64) *batondriver.LockReleaseResult {
	f.t.Helper()
	res, err := f.d.LockRelease(f.ctx, &batondriver.LockReleaseParams{Key: f.key, Token: tok, Fence: fence})
	require.NoError(f.t, err)
	return res
}

// giveUp gives up waiting as batonlock does, not knowing whether tok was
// queued or granted, to be remembered for waitTTL.
func (f *lockFixture) giveUp(tok string, waitTTL time.Duration) *batondriver.LockReleaseResult {
	f.t.Helper()
	res, err := f.d.LockRelease(f.ctx, &batondriver.LockReleaseParams{Key: f.key, Token: tok, WaitTTL: waitTTL})
	require.NoError(f.t, err)
	return res
}

func (f *lockFixture) inspect() *batondriver.LockInspectResult {
	f.t.Helper()
	res, err := f.d.LockInspect(f.ctx, &batondriver.LockInspectParams{Key: f.key})
	require.NoError(f.t, err)
	return res
}

func (f *lockFixture) setLimit(n int) int {
	f.t.Helper()
	res, err := f.d.LockSetLimit(f.ctx, &batondriver.LockSetLimitParams{Key: f.key, Limit: n})
	require.NoError(f.t, err)
	return res.Promoted
}

// notice waits (boundedly) for the listener's next grant notice.
func (f *lockFixture) notice(lis batondriver.LockListener) batondriver.LockNotice {
	f.t.Helper()
	for {
		select {
		case n := <-lis.C():
			if n.Recheck {
				continue
			}
			return n
		case <-time.After(5 * time.Second):
			f.t.Fatal("no grant notice within 5s")
		}
	}
}

// noNotice asserts that no grant notice is pending on the listener.
func (f *lockFixture) noNotice(lis batondriver.LockListener) {
	f.t.Helper()
	// Notices travel asynchronously on some backends; give one a moment.
	select {
	case n := <-lis.C():
		if !n.Recheck {
			f.t.Fatalf("unexpected grant notice %+v", n)
		}
	case <-time.After(50 * time.Millisecond):
	}
}

func tokens(hs []batondriver.LockHolder) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.Token)
	}
	return out
}

func waiterTokens(ws []batondriver.LockWaiter) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.Token)
	}
	return out
}

func exerciseLocks(t *testing.T, newDriver func(t *testing.T) batondriver.LockDriver) {
	t.Run("MutexGrantsOne", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		a, b := token(), token()
		ra := f.grant(a, 1)
		require.Equal(t, 10*time.Second, ra.TTL)
		rb := f.try(b, 1, time.Second)
		require.False(t, rb.Granted)
		require.Zero(t, rb.Position, "a try must not queue")
		require.Positive(t, rb.NextExpiry)
		require.True(t, f.release(a, ra.Fence).Released)
		f.grant(b, 1)
	})

	t.Run("SemaphoreGrantsLimit", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		var fences []uint64
		toks := []string{token(), token(), token()}
		for _, tok := range toks {
			fences = append(fences, f.grant(tok, 3).Fence)
		}
		require.False(t, f.try(token(), 3, time.Second).Granted)
		info := f.inspect()
		require.Equal(t, 3, info.Limit)
		require.False(t, info.Override)
		require.ElementsMatch(t, toks, tokens(info.Holders))
		require.Equal(t, fences[2], info.LastFence)
		f.release(toks[1], fences[1])
		f.grant(token(), 3)
	})

	// Each release leaves the key idle, and a backend may forget an idle
	// key (one without an override) at once or later: its fences rise all
	// the same.
	t.Run("FencesStrictlyIncrease", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		var last uint64
		for range 20 {
			tok := token()
			r := f.grant(tok, 1)
			require.Greater(t, r.Fence, last)
			last = r.Fence
			require.Equal(t, last, f.inspect().LastFence, "while held")
			f.release(tok, r.Fence)
		}
	})

	t.Run("ReleaseChecksToken", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		a := token()
		r := f.grant(a, 1)
		require.False(t, f.release(token(), r.Fence).Released, "a stranger's token released the lock")
		require.False(t, f.release(a, r.Fence+1).Released, "a wrong fence released the lock")
		require.Equal(t, []string{a}, tokens(f.inspect().Holders))
		require.True(t, f.release(a, r.Fence).Released)
		require.False(t, f.release(a, r.Fence).Released, "a second release must report not held")
		require.Empty(t, f.inspect().Holders)
	})

	t.Run("LeaseExpires", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		a := token()
		r := f.try(a, 1, 100*time.Millisecond)
		require.True(t, r.Granted)
		require.Eventually(t, func() bool { return f.try(token(), 1, time.Second).Granted }, 3*time.Second, 10*time.Millisecond)
		ext, err := f.d.LockExtend(f.ctx, &batondriver.LockExtendParams{Key: f.key, Token: a, Fence: r.Fence, TTL: time.Second})
		require.NoError(t, err)
		require.False(t, ext.Extended, "an expired lease was extended")
		require.False(t, f.release(a, r.Fence).Released, "an expired lease reported released")
	})

	t.Run("ExpiredUnreapedLeaseNeverExtends", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		a := token()
		r := f.try(a, 1, 50*time.Millisecond)
		require.True(t, r.Granted)
		time.Sleep(100 * time.Millisecond) // let it expire with no other transition on the key
		ext, err := f.d.LockExtend(f.ctx, &batondriver.LockExtendParams{Key: f.key, Token: a, Fence: r.Fence, TTL: time.Second})
		require.NoError(t, err)
		require.False(t, ext.Extended)
		require.Empty(t, f.inspect().Holders)
	})

	t.Run("ExtendKeepsLease", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		a := token()
		r := f.try(a, 1, 150*time.Millisecond)
		require.True(t, r.Granted)
		ext, err := f.d.LockExtend(f.ctx, &batondriver.LockExtendParams{Key: f.key, Token: a, Fence: r.Fence, TTL: 5 * time.Second})
		require.NoError(t, err)
		require.True(t, ext.Extended)
		time.Sleep(200 * time.Millisecond)
		require.False(t, f.try(token(), 1, time.Second).Granted, "an extended lease expired at its old TTL")
		h := f.inspect().Holders
		require.Len(t, h, 1)
		require.Greater(t, h[0].TTL, 4*time.Second)
		bad, err := f.d.LockExtend(f.ctx, &batondriver.LockExtendParams{Key: f.key, Token: token(), Fence: r.Fence, TTL: time.Second})
		require.NoError(t, err)
		require.False(t, bad.Extended, "a stranger extended the lease")
	})

	// A token that asks to wait again (not a recheck) while queued is
	// queued once, at the back, behind those who came after it: a Wait is
	// an arrival, and only a Recheck keeps a waiter's place (batonlock
	// waits once, then rechecks). It is granted one slot, and leaves no
	// place behind.
	t.Run("WaitTwiceQueuesOnce", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		again := func(tok string, recheck bool) int {
			t.Helper()
			res, err := f.d.LockAcquire(f.ctx, &batondriver.LockAcquireParams{
				Key: f.key, Token: tok, Limit: 1, TTL: 10 * time.Second, Wait: true, Recheck: recheck, WaitTTL: 10 * time.Second,
			})
			require.NoError(t, err)
			require.False(t, res.Granted)
			return res.Position
		}
		a := f.grant("a", 1)
		lb, res := f.wait("b", 1, 10*time.Second)
		require.Equal(t, 1, res.Position)
		require.Equal(t, 1, again("b", false), "queued twice")
		require.Equal(t, []string{"b"}, waiterTokens(f.inspect().Waiters))

		lc, res := f.wait("c", 1, 10*time.Second)
		require.Equal(t, 2, res.Position)
		require.Equal(t, 1, again("b", true), "a recheck lost its place")
		require.Equal(t, 2, again("b", false), "a second Wait kept its place")
		in := f.inspect()
		require.Equal(t, []string{"c", "b"}, waiterTokens(in.Waiters))
		require.Equal(t, 2, in.WaiterCount)

		require.Equal(t, 1, f.release("a", a.Fence).Promoted)
		c := f.notice(lc)
		f.noNotice(lb)
		in = f.inspect()
		require.Equal(t, []string{"c"}, tokens(in.Holders))
		require.Equal(t, []string{"b"}, waiterTokens(in.Waiters))
		f.release("c", c.Fence)
		f.notice(lb)
		in = f.inspect()
		require.Equal(t, []string{"b"}, tokens(in.Holders), "b granted once")
		require.Empty(t, in.Waiters, "b left a place behind")
	})

	// A token that holds a slot is granted no second one by a Try or a
	// Wait (a Recheck neither): the call reports the grant it holds, its
	// fence and the TTL it has left, and changes nothing — whether a slot
	// is free, the key is full or waiters are queued. A call sent again
	// with the same token so never takes two slots, nor ends the lease it
	// was granted.
	t.Run("HeldTokenGetsNoSecondSlot", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		again := func(tok string, wait bool) *batondriver.LockAcquireResult {
			t.Helper()
			res, err := f.d.LockAcquire(f.ctx, &batondriver.LockAcquireParams{
				Key: f.key, Token: tok, Limit: 2, TTL: time.Minute, Wait: wait, WaitTTL: 10 * time.Second,
			})
			require.NoError(t, err)
			return res
		}
		reports := func(held, res *batondriver.LockAcquireResult, what string) {
			t.Helper()
			require.True(t, res.Granted, "%s: the holder was refused", what)
			require.Equal(t, held.Fence, res.Fence, "%s: not the fence held", what)
			require.LessOrEqual(t, res.TTL, held.TTL, "%s: the lease was extended", what)
			require.Greater(t, res.TTL, held.TTL-time.Second, "%s: not the TTL left", what)
			require.Zero(t, res.Position, "%s: the holder was queued", what)
		}
		a := f.grant("a", 2)
		reports(a, again("a", false), "try with a slot free")
		reports(a, again("a", true), "wait with a slot free")
		in := f.inspect()
		require.Equal(t, []string{"a"}, tokens(in.Holders))
		require.Equal(t, a.Fence, in.Holders[0].Fence)
		require.LessOrEqual(t, in.Holders[0].TTL, a.TTL, "the lease was extended")
		require.Equal(t, a.Fence, in.LastFence, "a fence was issued")
		require.Empty(t, in.Waiters)

		b := f.grant("b", 2)
		lc, _ := f.wait("c", 2, 10*time.Second)
		reports(a, again("a", false), "try on a full key")
		reports(a, again("a", true), "wait on a full key")
		in = f.inspect()
		require.Equal(t, []string{"a", "b"}, tokens(in.Holders))
		require.Equal(t, []string{"c"}, waiterTokens(in.Waiters))
		require.Equal(t, b.Fence, in.LastFence, "a fence was issued")

		rel := f.release("a", a.Fence)
		require.True(t, rel.Released)
		require.Equal(t, 1, rel.Promoted)
		f.notice(lc)
		require.Equal(t, []string{"b", "c"}, tokens(f.inspect().Holders))
	})

	// A lease that ran out is held no more, even before a transition
	// removed it (b's lease keeps the key, which is not full): its token
	// asking again is granted a new one, its only slot, which one release
	// gives back.
	t.Run("HeldTokenAfterLeaseRanOutIsGrantedAnew", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		b := f.grant("b", 3)
		old := f.try("a", 3, 50*time.Millisecond)
		require.True(t, old.Granted)
		time.Sleep(100 * time.Millisecond)
		res := f.try("a", 3, 10*time.Second)
		require.True(t, res.Granted)
		require.Greater(t, res.Fence, old.Fence)
		require.Equal(t, 10*time.Second, res.TTL, "an ended lease was reported")
		in := f.inspect()
		require.Equal(t, []string{"b", "a"}, tokens(in.Holders))
		require.Equal(t, res.Fence, in.Holders[1].Fence)
		require.True(t, f.release("a", 0).Released)
		require.Equal(t, []string{"b"}, tokens(f.inspect().Holders), "a release left a slot to the token")
		require.True(t, f.release("b", b.Fence).Released)
	})

	t.Run("WaitersGrantedInArrivalOrder", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		holder := token()
		r := f.grant(holder, 1)
		w := []string{token(), token(), token()}
		var lis []batondriver.LockListener
		for i, tok := range w {
			l, res := f.wait(tok, 1, 10*time.Second)
			require.False(t, res.Granted)
			require.Equal(t, i+1, res.Position)
			lis = append(lis, l)
		}
		require.Equal(t, w, waiterTokens(f.inspect().Waiters))
		require.Equal(t, 3, f.inspect().WaiterCount)

		// No barging: a try fails while waiters are queued, even with a free slot.
		rel := f.release(holder, r.Fence)
		require.True(t, rel.Released)
		require.Equal(t, 1, rel.Promoted)
		require.False(t, f.try(token(), 1, time.Second).Granted, "a try overtook a waiter")

		prev := r.Fence
		for i, tok := range w {
			n := f.notice(lis[i])
			require.Greater(t, n.Fence, prev)
			require.Equal(t, 10*time.Second, n.TTL)
			require.False(t, n.GrantedAt.IsZero())
			for _, other := range lis[i+1:] {
				f.noNotice(other)
			}
			require.Equal(t, []string{tok}, tokens(f.inspect().Holders))
			f.release(tok, n.Fence)
			prev = n.Fence
		}
		require.Empty(t, f.inspect().Waiters)
	})

	t.Run("ReleaseWakesOnlyWhomItGrants", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		h1, h2 := token(), token()
		r1 := f.grant(h1, 2)
		f.grant(h2, 2)
		var lis []batondriver.LockListener
		for range 4 {
			l, _ := f.wait(token(), 2, 10*time.Second)
			lis = append(lis, l)
		}
		f.release(h1, r1.Fence)
		f.notice(lis[0])
		for _, l := range lis[1:] {
			f.noNotice(l)
		}
	})

	t.Run("RecheckReportsGrantAndRefreshesPlace", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		holder := token()
		r := f.grant(holder, 1)
		w := token()
		lis, _ := f.wait(w, 1, 10*time.Second)
		p := &batondriver.LockAcquireParams{Key: f.key, Token: w, Limit: 1, TTL: 10 * time.Second, Recheck: true, WaitTTL: 10 * time.Second}
		res, err := f.d.LockAcquire(f.ctx, p)
		require.NoError(t, err)
		require.False(t, res.Granted)
		require.Equal(t, 1, res.Position)
		f.release(holder, r.Fence)
		n := f.notice(lis)
		res, err = f.d.LockAcquire(f.ctx, p)
		require.NoError(t, err)
		require.True(t, res.Granted, "a recheck after a grant must report it")
		require.Equal(t, n.Fence, res.Fence)
		require.Greater(t, res.TTL, 9*time.Second)
		require.Len(t, f.inspect().Holders, 1, "a recheck must not take a second slot")
	})

	// A grant that ran out before its waiter heard of it (the notice lost,
	// the waiter slow) is no longer held, on a semaphore with slots free
	// too: a recheck then asks anew, and is never told of a lease that
	// has already ended.
	t.Run("RecheckAfterGrantExpiredAsksAnew", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		a, b := f.grant("a", 2), f.grant("b", 2)
		w := token()
		lis, err := f.d.LockListen(f.ctx, &batondriver.LockListenParams{Key: f.key, Token: w})
		require.NoError(t, err)
		t.Cleanup(lis.Close)
		p := &batondriver.LockAcquireParams{Key: f.key, Token: w, Limit: 2, TTL: 50 * time.Millisecond, Wait: true, WaitTTL: 10 * time.Second}
		res, err := f.d.LockAcquire(f.ctx, p)
		require.NoError(t, err)
		require.Equal(t, 1, res.Position)
		f.release("b", b.Fence)
		stale := f.notice(lis)
		f.release("a", a.Fence)
		time.Sleep(100 * time.Millisecond) // the grant runs out unheard
		p.Recheck = true
		res, err = f.d.LockAcquire(f.ctx, p)
		require.NoError(t, err)
		require.True(t, res.Granted, "both slots are free")
		require.Equal(t, 50*time.Millisecond, res.TTL, "a recheck reported a lease that had ended")
		require.Greater(t, res.Fence, stale.Fence)
		require.Len(t, f.inspect().Holders, 1)
	})

	t.Run("WaiterGivingUpLeavesQueue", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		holder := token()
		r := f.grant(holder, 1)
		w1, w2 := token(), token()
		f.wait(w1, 1, 10*time.Second)
		l2, _ := f.wait(w2, 1, 10*time.Second)
		require.False(t, f.release(w1, 0).Released, "a waiter that never held reported a release")
		require.Equal(t, []string{w2}, waiterTokens(f.inspect().Waiters))
		f.release(holder, r.Fence)
		f.notice(l2)
	})

	t.Run("WaiterGivingUpReturnsGrant", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		holder := token()
		r := f.grant(holder, 1)
		w1, w2 := token(), token()
		l1, _ := f.wait(w1, 1, 10*time.Second)
		l2, _ := f.wait(w2, 1, 10*time.Second)
		f.release(holder, r.Fence)
		f.notice(l1)
		// w1 was granted, but gives up without knowing its fence.
		rel := f.release(w1, 0)
		require.True(t, rel.Released)
		require.Equal(t, 1, rel.Promoted)
		f.notice(l2)
		require.Equal(t, []string{w2}, tokens(f.inspect().Holders))
	})

	// A waiter's recheck sent before it gave up, that runs after the give-up
	// (its reply was cut off by the waiter's deadline; on Redis the two can
	// travel on different connections), must not queue it again nor take
	// the slot that is free by then.
	t.Run("RecheckAfterGiveUpChangesNothing", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		holder := token()
		r := f.grant(holder, 1)
		w := token()
		f.wait(w, 1, 10*time.Second)
		require.False(t, f.giveUp(w, 10*time.Second).Released)
		f.release(holder, r.Fence)
		res, err := f.d.LockAcquire(f.ctx, &batondriver.LockAcquireParams{
			Key: f.key, Token: w, Limit: 1, TTL: 10 * time.Second, Recheck: true, WaitTTL: 10 * time.Second,
		})
		require.NoError(t, err)
		require.False(t, res.Granted, "a slot went to a waiter that had given up")
		require.Zero(t, res.Position, "a waiter that had given up queued again")
		info := f.inspect()
		require.Empty(t, info.Holders)
		require.Empty(t, info.Waiters)
		f.grant(token(), 1)
	})

	// The same for a waiter's first call, overtaken by its give-up.
	t.Run("WaitAfterGiveUpChangesNothing", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		w := token()
		require.False(t, f.giveUp(w, 10*time.Second).Released)
		_, res := f.wait(w, 1, 10*time.Second)
		require.False(t, res.Granted, "a free slot went to a waiter that had given up")
		require.Zero(t, res.Position)
		require.Empty(t, f.inspect().Holders)
		require.True(t, f.try(token(), 1, 10*time.Second).Granted, "the key is free")
	})

	// A late call of a token that gave up changes nothing at all, whether
	// a first wait or a recheck: the larger default limit it carries is
	// not stored, so the waiter still queued gets no slot from it.
	t.Run("LateCallAfterGiveUpStoresNoDefault", func(t *testing.T) {
		for _, recheck := range []bool{false, true} {
			t.Run(fmt.Sprintf("Recheck=%v", recheck), func(t *testing.T) {
				f := newLockFixture(t, newDriver)
				holder := token()
				f.grant(holder, 1)
				w, other := token(), token()
				f.wait(w, 1, 10*time.Second)
				lis, _ := f.wait(other, 1, 10*time.Second)
				f.giveUp(w, 10*time.Second)
				res, err := f.d.LockAcquire(f.ctx, &batondriver.LockAcquireParams{
					Key: f.key, Token: w, Limit: 3, TTL: 10 * time.Second, Wait: !recheck, Recheck: recheck, WaitTTL: 10 * time.Second,
				})
				require.NoError(t, err)
				require.False(t, res.Granted)
				require.Zero(t, res.Position)
				info := f.inspect()
				require.Equal(t, 1, info.Limit, "the late call stored its default limit")
				require.Equal(t, []string{holder}, tokens(info.Holders), "the late call granted a waiter")
				require.Equal(t, []string{other}, waiterTokens(info.Waiters))
				f.noNotice(lis)
			})
		}
	})

	// A token that gave up and took a slot since (a Try, which no mark
	// stops) holds it: a waiting or rechecking call of it, late or not,
	// reports that grant, as for any holder, and changes nothing. What a
	// token holds is looked at before its give-up mark, in every mode.
	t.Run("HeldSlotReportedBeforeGiveUpMark", func(t *testing.T) {
		for _, recheck := range []bool{false, true} {
			t.Run(fmt.Sprintf("Recheck=%v", recheck), func(t *testing.T) {
				f := newLockFixture(t, newDriver)
				w := token()
				f.giveUp(w, 10*time.Second)
				g := f.grant(w, 2)
				res, err := f.d.LockAcquire(f.ctx, &batondriver.LockAcquireParams{
					Key: f.key, Token: w, Limit: 2, TTL: 10 * time.Second, Wait: !recheck, Recheck: recheck, WaitTTL: 10 * time.Second,
				})
				require.NoError(t, err)
				require.True(t, res.Granted, "a token that holds a slot was told it holds none: its give-up mark went first")
				require.Equal(t, g.Fence, res.Fence, "the grant it holds")
				require.Positive(t, res.TTL)
				require.LessOrEqual(t, res.TTL, 10*time.Second, "the lease was extended")
				require.Zero(t, res.Position)
				info := f.inspect()
				require.Equal(t, []string{w}, tokens(info.Holders), "a second slot, or none")
				require.Equal(t, g.Fence, info.LastFence, "a fence was issued")
				require.Empty(t, info.Waiters)
				// The mark still stands once the slot is given back.
				f.release(w, g.Fence)
				_, res = f.wait(w, 2, 10*time.Second)
				require.False(t, res.Granted, "the mark went with the slot")
				require.Zero(t, res.Position)
			})
		}
	})

	// The mark of a give-up lasts WaitTTL, then the token is a stranger;
	// with no WaitTTL there is none.
	t.Run("GiveUpMarkLastsWaitTTL", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		w, other := token(), token()
		f.giveUp(w, 50*time.Millisecond)
		f.release(other, 0)
		_, res := f.wait(other, 1, 10*time.Second)
		require.True(t, res.Granted, "a release without WaitTTL marked its token")
		f.release(other, res.Fence)
		time.Sleep(100 * time.Millisecond)
		_, res = f.wait(w, 1, 10*time.Second)
		require.True(t, res.Granted, "the mark outlived its WaitTTL")
	})

	// The mark lasts WaitTTL even while other waiters keep the queue
	// alive for longer: then the token is a stranger and may wait.
	t.Run("GiveUpMarkLastsWaitTTLInBusyQueue", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		f.grant(token(), 1)
		other, w := token(), token()
		f.wait(other, 1, 10*time.Second)
		f.giveUp(w, 50*time.Millisecond)
		time.Sleep(100 * time.Millisecond)
		_, res := f.wait(w, 1, 10*time.Second)
		require.Equal(t, 2, res.Position, "the mark outlived its WaitTTL")
		require.Equal(t, []string{other, w}, waiterTokens(f.inspect().Waiters))
	})

	// Nor does a waiter with a shorter WaitTTL (another process's
	// setting), queued after the give-up, cut the mark short.
	t.Run("GiveUpMarkOutlivesShorterPlaces", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		f.grant(token(), 1)
		w := token()
		f.giveUp(w, 10*time.Second)
		f.wait(token(), 1, 50*time.Millisecond)
		time.Sleep(150 * time.Millisecond)
		_, res := f.wait(w, 1, 10*time.Second)
		require.Zero(t, res.Position, "the mark went with a shorter place")
		require.Empty(t, f.inspect().Waiters)
	})

	t.Run("DeadWaiterIsDropped", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		holder := token()
		r := f.grant(holder, 1)
		dead, alive := token(), token()
		f.wait(dead, 1, 60*time.Millisecond) // never refreshed
		la, _ := f.wait(alive, 1, 10*time.Second)
		time.Sleep(120 * time.Millisecond)
		require.Equal(t, []string{alive}, waiterTokens(f.inspect().Waiters))
		f.release(holder, r.Fence)
		f.notice(la)
		require.Equal(t, []string{alive}, tokens(f.inspect().Holders))
	})

	// A waiter whose place expired (its process paused past WaitTTL) and
	// asks again queues again, behind those who kept their places, also
	// while the key is full and nothing dropped it yet.
	t.Run("RecheckAfterPlaceExpiredQueuesAgain", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		f.grant(token(), 1)
		late, alive := token(), token()
		f.wait(late, 1, 50*time.Millisecond) // not refreshed in time
		f.wait(alive, 1, 10*time.Second)
		time.Sleep(100 * time.Millisecond)
		res, err := f.d.LockAcquire(f.ctx, &batondriver.LockAcquireParams{
			Key: f.key, Token: late, Limit: 1, TTL: 10 * time.Second, Recheck: true, WaitTTL: 10 * time.Second,
		})
		require.NoError(t, err)
		require.Equal(t, 2, res.Position, "an expired place was kept")
		require.Equal(t, []string{alive, late}, waiterTokens(f.inspect().Waiters))
	})

	t.Run("ExpiredHolderSlotGoesToWaiter", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		crashed := token()
		// Long enough that a loaded machine (the race detector, the whole
		// suite in parallel) still queues the waiter before it ends.
		const lease = 300 * time.Millisecond
		require.True(t, f.try(crashed, 1, lease).Granted)
		w := token()
		lis, res := f.wait(w, 1, 10*time.Second)
		require.False(t, res.Granted)
		require.Positive(t, res.NextExpiry)
		require.LessOrEqual(t, res.NextExpiry, lease)
		// Nobody releases: the waiter's recheck after NextExpiry finds the slot.
		time.Sleep(res.NextExpiry + 20*time.Millisecond)
		res, err := f.d.LockAcquire(f.ctx, &batondriver.LockAcquireParams{Key: f.key, Token: w, Limit: 1, TTL: 10 * time.Second, Recheck: true, WaitTTL: 10 * time.Second})
		require.NoError(t, err)
		require.True(t, res.Granted)
		f.notice(lis) // the recheck's own promotion also notified it
	})

	t.Run("ZeroLimitHalts", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		holder := token()
		r := f.grant(holder, 2)
		require.Zero(t, f.setLimit(0))
		require.False(t, f.try(token(), 2, time.Second).Granted, "a halted key granted a slot")
		w1, w2 := token(), token()
		l1, _ := f.wait(w1, 2, 10*time.Second)
		l2, _ := f.wait(w2, 2, 10*time.Second)
		rel := f.release(holder, r.Fence)
		require.Zero(t, rel.Promoted, "a halted key promoted a waiter")
		f.noNotice(l1)
		info := f.inspect()
		require.Equal(t, 0, info.Limit)
		require.True(t, info.Override)
		require.Equal(t, 2, info.WaiterCount, "waiters keep their places while halted")

		require.Equal(t, 2, f.setLimit(5), "raising the limit must grant waiters at once")
		f.notice(l1)
		f.notice(l2)
		require.Len(t, f.inspect().Holders, 2)
	})

	t.Run("LoweredLimitAdmitsNoneUntilUnder", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		toks := []string{token(), token(), token()}
		var fences []uint64
		for _, tok := range toks {
			fences = append(fences, f.grant(tok, 3).Fence)
		}
		f.setLimit(1)
		w := token()
		lis, _ := f.wait(w, 3, 10*time.Second)
		require.Zero(t, f.release(toks[0], fences[0]).Promoted)
		require.Zero(t, f.release(toks[1], fences[1]).Promoted)
		f.noNotice(lis)
		require.Equal(t, 1, f.release(toks[2], fences[2]).Promoted)
		f.notice(lis)
	})

	t.Run("ResetLimitRestoresDefault", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		tok := token()
		r := f.grant(tok, 2)
		f.setLimit(7)
		require.Equal(t, 7, f.inspect().Limit)
		_, err := f.d.LockSetLimit(f.ctx, &batondriver.LockSetLimitParams{Key: f.key, Reset: true})
		require.NoError(t, err)
		info := f.inspect()
		require.Equal(t, 2, info.Limit)
		require.False(t, info.Override)
		f.release(tok, r.Fence)
		// An override outlives an idle key: it is kept however long the key
		// stays unused.
		f.setLimit(4)
		tok = token()
		r2 := f.grant(tok, 2)
		require.Greater(t, r2.Fence, r.Fence)
		f.release(tok, r2.Fence)
		info = f.inspect()
		require.Equal(t, 4, info.Limit)
		require.True(t, info.Override)
	})

	t.Run("InspectUnknownKey", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		info := f.inspect()
		require.Zero(t, info.Limit)
		require.Zero(t, info.LastFence)
		require.Empty(t, info.Holders)
		require.Empty(t, info.Waiters)
		require.False(t, info.Now.IsZero())
	})

	t.Run("KeysAreDistinct", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		for _, key := range []string{"a{b}", "a%7Bb%7D", "a{b", "a}b", "{}", "a|b", "a b", "a\x00b", "\xff\xfe", "ключ"} {
			g := *f
			g.key = f.key + key
			g.grant(token(), 1)
		}
	})

	// Bad parameters are refused with ErrBadParams, and the error says which
	// field is wrong, and of which key: it names that field and no other. A
	// token may hold neither ':' nor '|' (LockAcquireParams.Token).
	t.Run("BadParams", func(t *testing.T) {
		f := newLockFixture(t, newDriver)
		k := f.key
		bad := func(t *testing.T, err error, key, field string, fields ...string) {
			t.Helper()
			require.ErrorIs(t, err, batondriver.ErrBadParams)
			require.ErrorContains(t, err, field)
			msg := err.Error()
			if key != "" {
				require.ErrorContains(t, err, fmt.Sprintf("%q", key), "the key is not named")
				msg = strings.ReplaceAll(msg, fmt.Sprintf("%q", key), "")
			}
			for _, other := range fields {
				if other != field {
					require.NotRegexp(t, `\b`+other+`\b`, msg, "names %s, which is not wrong", other)
				}
			}
		}

		acquire := []string{"Key", "Token", "TTL", "Limit", "WaitTTL"}
		for name, c := range map[string]struct {
			p     batondriver.LockAcquireParams
			field string
		}{
			"empty key":          {batondriver.LockAcquireParams{Token: token(), Limit: 1, TTL: time.Second}, "Key"},
			"empty token":        {batondriver.LockAcquireParams{Key: k, Limit: 1, TTL: time.Second}, "Token"},
			"zero TTL":           {batondriver.LockAcquireParams{Key: k, Token: token(), Limit: 1}, "TTL"},
			"sub-ms TTL":         {batondriver.LockAcquireParams{Key: k, Token: token(), Limit: 1, TTL: time.Microsecond}, "TTL"},
			"negative limit":     {batondriver.LockAcquireParams{Key: k, Token: token(), Limit: -1, TTL: time.Second}, "Limit"},
			"no wait TTL":        {batondriver.LockAcquireParams{Key: k, Token: token(), Limit: 1, TTL: time.Second, Wait: true}, "WaitTTL"},
			"recheck no waitTTL": {batondriver.LockAcquireParams{Key: k, Token: token(), Limit: 1, TTL: time.Second, Recheck: true}, "WaitTTL"},
			"sub-ms wait TTL":    {batondriver.LockAcquireParams{Key: k, Token: token(), Limit: 1, TTL: time.Second, Wait: true, WaitTTL: time.Microsecond}, "WaitTTL"},
			"token with ':'":     {batondriver.LockAcquireParams{Key: k, Token: "1:" + token(), Limit: 1, TTL: time.Second}, "Token"},
			"token with '|'":     {batondriver.LockAcquireParams{Key: k, Token: token() + "|", Limit: 1, TTL: time.Second, Wait: true, WaitTTL: time.Second}, "Token"},
		} {
			t.Run("LockAcquire "+name, func(t *testing.T) {
				_, err := f.d.LockAcquire(f.ctx, &c.p)
				bad(t, err, c.p.Key, c.field, acquire...)
			})
		}

		release := []string{"Key", "Token", "WaitTTL"}
		for name, c := range map[string]struct {
			p     batondriver.LockReleaseParams
			field string
		}{
			"empty key":         {batondriver.LockReleaseParams{Token: token()}, "Key"},
			"empty token":       {batondriver.LockReleaseParams{Key: k}, "Token"},
			"negative wait TTL": {batondriver.LockReleaseParams{Key: k, Token: token(), WaitTTL: -time.Second}, "WaitTTL"},
			"sub-ms wait TTL":   {batondriver.LockReleaseParams{Key: k, Token: token(), WaitTTL: time.Microsecond}, "WaitTTL"},
			"token with ':'":    {batondriver.LockReleaseParams{Key: k, Token: "1:" + token(), Fence: 1}, "Token"},
			"token with '|'":    {batondriver.LockReleaseParams{Key: k, Token: "a|b", WaitTTL: time.Second}, "Token"},
		} {
			t.Run("LockRelease "+name, func(t *testing.T) {
				_, err := f.d.LockRelease(f.ctx, &c.p)
				bad(t, err, c.p.Key, c.field, release...)
			})
		}

		extend := []string{"Key", "Token", "Fence", "TTL"}
		for name, c := range map[string]struct {
			p     batondriver.LockExtendParams
			field string
		}{
			"empty key":      {batondriver.LockExtendParams{Token: token(), Fence: 1, TTL: time.Second}, "Key"},
			"empty token":    {batondriver.LockExtendParams{Key: k, Fence: 1, TTL: time.Second}, "Token"},
			"zero TTL":       {batondriver.LockExtendParams{Key: k, Token: token(), Fence: 1}, "TTL"},
			"zero fence":     {batondriver.LockExtendParams{Key: k, Token: token(), TTL: time.Second}, "Fence"},
			"token with ':'": {batondriver.LockExtendParams{Key: k, Token: token() + ":", Fence: 1, TTL: time.Second}, "Token"},
			"token with '|'": {batondriver.LockExtendParams{Key: k, Token: "|", Fence: 1, TTL: time.Second}, "Token"},
		} {
			t.Run("LockExtend "+name, func(t *testing.T) {
				_, err := f.d.LockExtend(f.ctx, &c.p)
				bad(t, err, c.p.Key, c.field, extend...)
			})
		}

		t.Run("LockSetLimit", func(t *testing.T) {
			_, err := f.d.LockSetLimit(f.ctx, &batondriver.LockSetLimitParams{Key: k, Limit: -1})
			bad(t, err, k, "Limit", "Key", "Limit")
			_, err = f.d.LockSetLimit(f.ctx, &batondriver.LockSetLimitParams{Limit: 1})
			bad(t, err, "", "Key", "Key", "Limit")
		})
		t.Run("LockInspect", func(t *testing.T) {
			_, err := f.d.LockInspect(f.ctx, &batondriver.LockInspectParams{})
			bad(t, err, "", "Key", "Key")
		})
		t.Run("LockListen", func(t *testing.T) {
			_, err := f.d.LockListen(f.ctx, &batondriver.LockListenParams{Token: token()})
			bad(t, err, "", "Key", "Key", "Token")
			_, err = f.d.LockListen(f.ctx, &batondriver.LockListenParams{Key: k})
			bad(t, err, k, "Token", "Key", "Token")
			for _, tok := range []string{"a:b", "a|b"} {
				_, err = f.d.LockListen(f.ctx, &batondriver.LockListenParams{Key: k, Token: tok})
				bad(t, err, k, "Token", "Key", "Token")
			}
		})
		in := f.inspect()
		require.Empty(t, in.Holders, "a refused call changed the key")
		require.Empty(t, in.Waiters, "a refused call changed the key")
	})
}

// exerciseLockEndedContexts checks that a lock call whose context has
// ended returns the context's error and changes nothing.
func exerciseLockEndedContexts(t *testing.T, newDriver func(t *testing.T) batondriver.LockDriver) {
	f := newLockFixture(t, newDriver)
	a, b := token(), token()
	held := f.grant(a, 2)
	before := f.inspect()
	ended, cancel := context.WithCancel(f.ctx)
	cancel()
	calls := map[string]func() error{
		"LockAcquire": func() error {
			_, err := f.d.LockAcquire(ended, &batondriver.LockAcquireParams{Key: f.key, Token: b, Limit: 2, TTL: time.Minute})
			return err
		},
		"LockRelease": func() error {
			_, err := f.d.LockRelease(ended, &batondriver.LockReleaseParams{Key: f.key, Token: a, Fence: held.Fence})
			return err
		},
		"LockExtend": func() error {
			_, err := f.d.LockExtend(ended, &batondriver.LockExtendParams{Key: f.key, Token: a, Fence: held.Fence, TTL: time.Hour})
			return err
		},
		"LockSetLimit": func() error {
			_, err := f.d.LockSetLimit(ended, &batondriver.LockSetLimitParams{Key: f.key, Limit: 5})
			return err
		},
		"LockInspect": func() error {
			_, err := f.d.LockInspect(ended, &batondriver.LockInspectParams{Key: f.key})
			return err
		},
		"LockList": func() error {
			_, err := f.d.LockList(ended, &batondriver.LockListParams{})
			return err
		},
		"LockListen": func() error {
			l, err := f.d.LockListen(ended, &batondriver.LockListenParams{Key: f.key, Token: b})
			if err == nil {
				l.Close()
			}
			return err
		},
	}
	for name, call := range calls {
		require.ErrorIs(t, call(), context.Canceled, "%s with an ended context", name)
	}
	after := f.inspect()
	require.Equal(t, before.Limit, after.Limit)
	require.False(t, after.Override, "no limit set")
	require.Equal(t, before.LastFence, after.LastFence, "nothing granted")
	require.Len(t, after.Holders, 1, "held still, by a alone")
	require.LessOrEqual(t, after.Holders[0].TTL, before.Holders[0].TTL, "not extended")
}

// exerciseLockEndedContextBadParams checks that a lock call with invalid
// parameters returns ErrBadParams whether or not its context has ended:
// bad parameters are a programming error, whatever the timing, so they are
// checked before the context on every backend.
func exerciseLockEndedContextBadParams(t *testing.T, newDriver func(t *testing.T) batondriver.LockDriver) {
	f := newLockFixture(t, newDriver)
	k, tok := f.key, token()
	calls := map[string]func(ctx context.Context) error{
		"LockAcquire": func(ctx context.Context) error {
			_, err := f.d.LockAcquire(ctx, &batondriver.LockAcquireParams{Key: k, Token: tok, Limit: 1})
			return err
		},
		"LockRelease": func(ctx context.Context) error {
			_, err := f.d.LockRelease(ctx, &batondriver.LockReleaseParams{Key: k, Token: tok, WaitTTL: -time.Second})
			return err
		},
		"LockExtend": func(ctx context.Context) error {
			_, err := f.d.LockExtend(ctx, &batondriver.LockExtendParams{Key: k, Token: tok, TTL: time.Minute})
			return err
		},
		"LockSetLimit": func(ctx context.Context) error {
			_, err := f.d.LockSetLimit(ctx, &batondriver.LockSetLimitParams{Key: k, Limit: -1})
			return err
		},
		"LockInspect": func(ctx context.Context) error {
			_, err := f.d.LockInspect(ctx, &batondriver.LockInspectParams{})
			return err
		},
		"LockList": func(ctx context.Context) error {
			_, err := f.d.LockList(ctx, &batondriver.LockListParams{Limit: -1})
			return err
		},
		"LockListen": func(ctx context.Context) error {
			l, err := f.d.LockListen(ctx, &batondriver.LockListenParams{Key: k, Token: "a:b"})
			if err == nil {
				l.Close()
			}
			return err
		},
	}
	requireBadParamsFirst(t, f.ctx, calls)
	require.Empty(t, f.inspect().Holders, "a refused call changed the key")
}

// requireBadParamsFirst runs each call, whose parameters are invalid, with
// a live context and with an ended one, and requires ErrBadParams from
// both, never the ended context's error.
func requireBadParamsFirst(t *testing.T, ctx context.Context, calls map[string]func(ctx context.Context) error) {
	t.Helper()
	ended, cancel := context.WithCancel(ctx)
	cancel()
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			require.ErrorIs(t, call(ctx), batondriver.ErrBadParams, "the parameters are not invalid")
			err := call(ended)
			require.ErrorIs(t, err, batondriver.ErrBadParams, "invalid parameters and an ended context")
			require.NotErrorIs(t, err, context.Canceled, "invalid parameters and an ended context")
		})
	}
}
