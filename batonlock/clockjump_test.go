package batonlock_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver/batonredis"
	"github.com/batonhq/baton/batonlock"
	"github.com/batonhq/baton/internal/redistest"
)

// The tests in this file step the Redis server's real-time clock
// (redistest.StartWithClock), which Redis expires keys by and Baton's
// scripts read with TIME, and check what docs/locking.md says a lease
// does and does not guarantee then. The lockers' own clocks do not move.

// jumpLockers returns n lockers, each on its own Redis client and driver,
// on the server at addr, sharing one key prefix; idle is the drivers'
// LockIdleTTL and waitTTL the lockers' WaitTTL (0: the defaults).
func jumpLockers(t *testing.T, addr string, idle, waitTTL time.Duration, n int) []*batonlock.Locker {
	t.Helper()
	ls := make([]*batonlock.Locker, n)
	for i := range ls {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		d, err := batonredis.New(c, &batonredis.Config{Prefix: "jump", LockIdleTTL: idle})
		require.NoError(t, err)
		t.Cleanup(d.Close)
		ls[i] = newLocker(t, d, &batonlock.Config{WaitTTL: waitTTL, Logger: slog.New(slog.DiscardHandler)})
	}
	return ls
}

// A forward jump of the server's clock past a held lease's remaining time
// frees the slot on the server while its holder, by its own monotonic
// clock, still holds it: another locker is granted the key at once, and
// for a moment both believe they hold it (the documented limitation,
// asserted so that the test says what happens). The new grant's fence is
// above the old one's, so a fenced store refuses the old holder's late
// write; and the old holder's lease context ends (ErrNotHeld) at its next
// heartbeat, within a heartbeat interval of the jump.
//
// Shown to fail on broken variants: with new_fence (lua/lib.lua) giving
// the key's last fence again (st.fence unchanged), the fence and store
// assertions fail; with Lease.extend treating a reply of "not extended"
// as extended (a heartbeat that ignores a lost lease), the old holder's
// context does not end within 3 heartbeat intervals.
func TestClockJumpForwardFreesHeldLease(t *testing.T) {
	t.Parallel()
	srv, clock := redistest.StartWithClock(t)
	ls := jumpLockers(t, srv.Addr(), 0, 0, 2)
	const ttl, beat = 3 * time.Second, time.Second
	opts := &batonlock.AcquireOpts{TTL: ttl, HeartbeatInterval: beat}
	ctx := context.Background()
	store := &fencedStore{} // ExampleLease_Fence's

	old, err := ls[0].TryAcquire(ctx, "k", opts)
	require.NoError(t, err)
	defer func() { _ = old.Release(ctx) }()
	require.NoError(t, store.Write(old.Fence(), "old"))
	clock.Jump(t, ttl+time.Second)
	jumped := time.Now()

	next, err := ls[1].TryAcquire(ctx, "k", opts)
	require.NoError(t, err, "the jump freed the held slot on the server")
	defer func() { _ = next.Release(ctx) }()
	require.NoError(t, old.Err(), "the old holder still believes it holds the key: two holders")
	require.Greater(t, next.Fence(), old.Fence(), "the new grant's fence is above the old one's")
	require.NoError(t, store.Write(next.Fence(), "next"))
	require.Error(t, store.Write(old.Fence(), "old, late"), "the fenced store refuses the old holder's late write")
	require.Equal(t, "next", store.value)

	select {
	case <-old.Done():
	case <-time.After(3 * beat):
		t.Fatal("the old holder's lease context did not end")
	}
	lost := time.Since(jumped)
	t.Logf("the old holder's context ended %v after the jump (heartbeat interval %v)", lost.Round(time.Millisecond), beat)
	require.ErrorIs(t, context.Cause(old.Context()), batonlock.ErrNotHeld)
	require.Less(t, lost, beat+500*time.Millisecond, "the old holder learns of the loss at its next heartbeat")
	require.NoError(t, next.Err(), "the new holder's lease is sound")
}

// A backward jump of the server's clock makes leases last longer on the
// server, never shorter: nobody else is granted a key early. A holder
// with heartbeats keeps its lease throughout. A key released and granted
// again right after the jump, while the server's clock reads earlier than
// at its last grant, gets a higher fence all the same (the last+1 part of
// max(last+1, ms × 1024)). A holder that crashed (no heartbeat, no
// release) is reclaimed later than its TTL by about the jump: a waiter is
// granted the key then, with a higher fence.
//
// Shown to fail on broken variants: with new_fence (lua/lib.lua) floored
// by the clock alone (st.fence = now * 1024) the grant right after the
// jump has a lower fence; with the jump left out (Jump of 0) the crashed
// holder is reclaimed at its TTL and the reclaim's lower bound fails.
func TestClockJumpBackwardLengthensLeases(t *testing.T) {
	t.Parallel()
	srv, clock := redistest.StartWithClock(t)
	ls := jumpLockers(t, srv.Addr(), 0, 0, 2)
	const ttl, back = time.Second, 2 * time.Second
	ctx := context.Background()

	kept, err := ls[0].TryAcquire(ctx, "kept", &batonlock.AcquireOpts{TTL: ttl})
	require.NoError(t, err)
	handed, err := ls[0].TryAcquire(ctx, "handed", &batonlock.AcquireOpts{TTL: ttl})
	require.NoError(t, err)
	sent := time.Now()
	crashed, err := ls[0].TryAcquire(ctx, "crashed", &batonlock.AcquireOpts{TTL: ttl, NoHeartbeat: true})
	require.NoError(t, err)
	clock.Jump(t, -back)

	_, err = ls[1].TryAcquire(ctx, "handed", nil)
	require.ErrorIs(t, err, batonlock.ErrNotAcquired)
	require.NoError(t, handed.Release(ctx))
	next, err := ls[1].TryAcquire(ctx, "handed", nil)
	require.NoError(t, err)
	require.Greater(t, next.Fence(), handed.Fence(), "a grant by a clock that reads earlier has a higher fence")
	require.NoError(t, next.Release(ctx))

	// The crashed holder's lease ends on its own clock at its TTL; on the
	// server's it has the jump still to run.
	<-crashed.Done()
	require.ErrorIs(t, context.Cause(crashed.Context()), batonlock.ErrLeaseExpired)
	_, err = ls[1].TryAcquire(ctx, "crashed", nil)
	require.ErrorIs(t, err, batonlock.ErrNotAcquired, "nobody is granted the key before the server's clock reaches the lease's end")

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	reclaim, err := ls[1].Acquire(wctx, "crashed", &batonlock.AcquireOpts{TTL: ttl})
	require.NoError(t, err)
	reclaimed := time.Since(sent)
	t.Logf("a crashed holder's TTL-%v lease reclaimed %v after its grant, the clock stepped back %v", ttl, reclaimed.Round(time.Millisecond), back)
	require.GreaterOrEqual(t, reclaimed, ttl+back-20*time.Millisecond, "reclaimed later than the TTL by the jump")
	require.Less(t, reclaimed, ttl+back+time.Second)
	require.Greater(t, reclaim.Fence(), crashed.Fence(), "fences rise across the jump")
	require.NoError(t, reclaim.Release(ctx))

	// The holder with heartbeats held on throughout.
	require.NoError(t, kept.Err())
	_, err = ls[1].TryAcquire(ctx, "kept", nil)
	require.ErrorIs(t, err, batonlock.ErrNotAcquired)
	require.NoError(t, kept.Release(ctx))
}

// A waiter granted a key by notice maps the server's grant time onto its
// own clock through the server time of its last call. If the server's
// clock jumps forward between that call and the grant, the mapping must
// not place the grant later than the notice's arrival: the lease would be
// trusted for the jump longer than the server keeps it. Here the waiter
// queues, the clock jumps 3s forward, the holder releases, and the waiter
// is granted a 2s lease without heartbeat by notice: its Until must be
// within its TTL of the notice, and when another locker is granted the
// key after the server's expiry, the waiter no longer trusts its lease.
//
// It failed before the waiter's mapping was bounded by the notice's
// arrival: Until was 4.98s after the grant, and the second locker was
// granted the key while the first still trusted its lease.
func TestClockJumpForwardNotifiedGrant(t *testing.T) {
	t.Parallel()
	srv, clock := redistest.StartWithClock(t)
	ls := jumpLockers(t, srv.Addr(), 0, 0, 3)
	const ttl, jump = 2 * time.Second, 3 * time.Second
	ctx := context.Background()

	holder, err := ls[0].TryAcquire(ctx, "k", &batonlock.AcquireOpts{TTL: 10 * time.Second})
	require.NoError(t, err)
	queued := make(chan struct{})
	type result struct {
		lease *batonlock.Lease
		err   error
		at    time.Time
	}
	granted := make(chan result, 1)
	go func() {
		l, err := ls[1].Acquire(ctx, "k", &batonlock.AcquireOpts{TTL: ttl, NoHeartbeat: true,
			OnWait: func(int) { close(queued) }})
		granted <- result{l, err, time.Now()}
	}()
	<-queued
	clock.Jump(t, jump)
	released := time.Now()
	require.NoError(t, holder.Release(ctx))
	var w result
	select {
	case w = <-granted:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not granted the released key")
	}
	require.NoError(t, w.err)
	defer func() { _ = w.lease.Release(ctx) }()
	t.Logf("the waiter's lease granted by notice is trusted until %v after the release (TTL %v, jump %v)",
		w.lease.Until().Sub(released).Round(time.Millisecond), ttl, jump)
	require.False(t, w.lease.Until().After(w.at.Add(ttl)), "a lease is trusted no longer than its TTL from its grant")

	// Once the server's expiry has passed, another locker is granted the
	// key; the waiter's lease must have ended by then.
	var next *batonlock.Lease
	require.Eventually(t, func() bool {
		next, err = ls[2].TryAcquire(ctx, "k", nil)
		return err == nil
	}, 2*ttl, 5*time.Millisecond, "the lease granted by notice never expired on the server")
	defer func() { _ = next.Release(ctx) }()
	require.ErrorIs(t, w.lease.Err(), batonlock.ErrLeaseExpired, "the waiter still trusted its lease when another was granted the key")
	require.Greater(t, next.Fence(), w.lease.Fence())
}

// A key idle longer than the driver's LockIdleTTL forgets its last fence:
// the next grant's fence is floored by the server's clock alone. A
// backward jump of that clock by more than the time since the key's last
// grant then gives a fence lower than that grant's: "strictly greater than
// every earlier grant, forever" holds only while the server's clock does
// not go back past the last grant of a forgotten key (docs/locking.md).
// Asserted as it happens, so that the test says what happens; a jump
// smaller than the time since the last grant keeps fences rising.
func TestClockJumpBackwardIdleKeyFence(t *testing.T) {
	t.Parallel()
	srv, clock := redistest.StartWithClock(t)
	const idle = 50 * time.Millisecond
	ls := jumpLockers(t, srv.Addr(), idle, 0, 1)
	ctx := context.Background()
	grant := func() uint64 {
		t.Helper()
		l, err := ls[0].TryAcquire(ctx, "idle", &batonlock.AcquireOpts{TTL: 100 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		return l.Fence()
	}
	forgotten := func() {
		t.Helper()
		require.Eventually(t, func() bool {
			info, err := ls[0].Inspect(ctx, "idle")
			return err == nil && info.LastFence == 0
		}, 5*time.Second, 5*time.Millisecond, "the idle key's counters never expired")
	}

	first := grant()
	forgotten()
	clock.Jump(t, -time.Minute)
	second := grant()
	require.Less(t, second, first, "a forgotten key's fence went back with the clock")
	forgotten() // the lease's TTL and idle after the grant, by the server's clock
	clock.Jump(t, -idle)
	third := grant()
	require.Greater(t, third, second, "a jump back by less than the time since the last grant keeps fences rising")
}

// A forward jump of the server's clock by more than WaitTTL expires every
// waiter's place at once: the queue is gone on the server, and FIFO order
// with it. A TryAcquire after the holder's release is granted ahead of
// the waiters that were queued (asserted as it happens, so that the test
// says what happens); each waiter, at its next recheck (every WaitTTL/3),
// queues again or is granted, and all are granted in the end. With a
// jump shorter than WaitTTL (or none) the newcomer is refused: the
// assertion fails, so it measures the jump.
func TestClockJumpForwardDropsWaiters(t *testing.T) {
	t.Parallel()
	srv, clock := redistest.StartWithClock(t)
	const waitTTL = time.Second
	ls := jumpLockers(t, srv.Addr(), 0, waitTTL, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	holder, err := ls[0].TryAcquire(ctx, "k", nil)
	require.NoError(t, err)
	granted := make(chan *batonlock.Lease, 2)
	for _, w := range ls[1:3] {
		queued := make(chan struct{})
		go func() {
			l, err := w.Acquire(ctx, "k", &batonlock.AcquireOpts{OnWait: func(int) { close(queued) }})
			if err != nil {
				l = nil
			}
			granted <- l
		}()
		<-queued
	}
	info, err := ls[3].Inspect(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, 2, info.WaiterCount)

	clock.Jump(t, 2*waitTTL)
	require.NoError(t, holder.Release(ctx))
	newcomer, err := ls[3].TryAcquire(ctx, "k", nil)
	require.NoError(t, err, "the waiters' places expired with the jump: a newcomer goes first")
	require.NoError(t, newcomer.Release(ctx))
	for range 2 {
		l := <-granted
		require.NotNil(t, l, "a waiter whose place expired was not granted the key in the end")
		require.Greater(t, l.Fence(), newcomer.Fence())
		require.NoError(t, l.Release(ctx))
	}
}
