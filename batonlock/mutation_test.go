package batonlock_test

// Tests written to kill mutants that the other tests let survive: each
// pins down one behaviour of the locker that nothing else checked.

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/batonlock"
)

// slowReplies runs each call at once and holds its reply back for delay:
// a reply slow to come back over the network.
type slowReplies struct {
	batondriver.LockDriver
	delay time.Duration
}

func (d *slowReplies) LockAcquire(ctx context.Context, p *batondriver.LockAcquireParams) (*batondriver.LockAcquireResult, error) {
	res, err := d.LockDriver.LockAcquire(ctx, p)
	time.Sleep(d.delay)
	return res, err
}

func (d *slowReplies) LockExtend(ctx context.Context, p *batondriver.LockExtendParams) (*batondriver.LockExtendResult, error) {
	res, err := d.LockDriver.LockExtend(ctx, p)
	time.Sleep(d.delay)
	return res, err
}

// TestUntilCountsFromTheCallNotItsReply: a lease's TTL runs on the
// backend from when the call ran, which is before its reply comes back:
// Until, after TryAcquire as after Extend, counts from when the call was
// sent, never from when its reply came.
func TestUntilCountsFromTheCallNotItsReply(t *testing.T) {
	t.Parallel()
	const ttl, delay = time.Second, 200 * time.Millisecond
	l := newLocker(t, &slowReplies{LockDriver: batonmem.New(), delay: delay}, nil)
	ctx := context.Background()

	before := time.Now()
	lease, err := l.TryAcquire(ctx, "slow", &batonlock.AcquireOpts{TTL: ttl, NoHeartbeat: true})
	require.NoError(t, err)
	require.True(t, lease.Until().Before(before.Add(ttl)),
		"TryAcquire: Until %v past the backend's expiry at the latest", lease.Until().Sub(before.Add(ttl)))

	before = time.Now()
	require.NoError(t, lease.Extend(ctx, ttl))
	require.True(t, lease.Until().Before(before.Add(ttl)),
		"Extend: Until %v past the backend's expiry at the latest", lease.Until().Sub(before.Add(ttl)))
	require.NoError(t, lease.Release(ctx))
}

// lateGrants delivers a waiter's notices delay after the backend sent
// them.
type lateGrants struct {
	batondriver.LockDriver
	delay time.Duration
}

func (d *lateGrants) LockListen(ctx context.Context, p *batondriver.LockListenParams) (batondriver.LockListener, error) {
	in, err := d.LockDriver.LockListen(ctx, p)
	if err != nil {
		return nil, err
	}
	l := &lateListener{in: in, ch: make(chan batondriver.LockNotice, 4), done: make(chan struct{})}
	go func() {
		for {
			select {
			case n := <-in.C():
				time.Sleep(d.delay)
				l.ch <- n
			case <-l.done:
				return
			}
		}
	}()
	return l, nil
}

// TestGrantNoticeUntilCountsFromTheGrant: a waiter granted a slot by a
// notice that reaches it late holds a lease that started when the backend
// granted it, not when the notice came: Until counts from the grant.
func TestGrantNoticeUntilCountsFromTheGrant(t *testing.T) {
	t.Parallel()
	const ttl, delay = time.Second, 200 * time.Millisecond
	d := batonmem.New()
	l := newLocker(t, d, nil)
	late := newLocker(t, &lateGrants{LockDriver: d, delay: delay}, nil)
	ctx := context.Background()
	holder, err := l.TryAcquire(ctx, "late", nil)
	require.NoError(t, err)
	queued := make(chan struct{})
	got := make(chan *batonlock.Lease, 1)
	go func() {
		lease, err := late.Acquire(ctx, "late", &batonlock.AcquireOpts{TTL: ttl, NoHeartbeat: true, OnWait: func(int) { close(queued) }})
		require.NoError(t, err)
		got <- lease
	}()
	<-queued
	require.NoError(t, holder.Release(ctx)) // grants the slot to the waiter
	granted := time.Now()                   // no earlier than the grant
	lease := <-got
	require.True(t, lease.Until().Before(granted.Add(ttl)),
		"Until %v past the backend's expiry at the latest", lease.Until().Sub(granted.Add(ttl)))
	require.NoError(t, lease.Release(ctx))
}

// TestWaiterTakesOverFromACrashedHolder: a holder that dies sends no
// release, so no notice wakes the waiter; it asks the backend again soon
// after the holder's lease can have expired, not only when its place
// needs refreshing (WaitTTL/3).
func TestWaiterTakesOverFromACrashedHolder(t *testing.T) {
	backends(t, func(t *testing.T, d batondriver.LockDriver) {
		l := newLocker(t, d, &batonlock.Config{WaitTTL: 30 * time.Second}) // refreshed every 10s
		ctx := context.Background()
		crashed, err := l.TryAcquire(ctx, "crash", &batonlock.AcquireOpts{TTL: 200 * time.Millisecond, NoHeartbeat: true})
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		began := time.Now()
		lease, err := l.Acquire(wctx, "crash", nil)
		require.NoError(t, err, "the waiter was not granted the slot of the holder that died")
		require.Less(t, time.Since(began), 5*time.Second)
		require.Greater(t, lease.Fence(), crashed.Fence())
		require.NoError(t, lease.Release(ctx))
	})
}

// recheckFails lets a waiter queue, then fails its first recheck, which
// the listener it gets asks for at once: a backend that went away while
// the caller waited.
type recheckFails struct {
	batondriver.LockDriver
	always bool         // every recheck fails
	times  atomic.Int32 // else how many rechecks fail (below 0 once they did)
}

func (d *recheckFails) LockListen(ctx context.Context, p *batondriver.LockListenParams) (batondriver.LockListener, error) {
	in, err := d.LockDriver.LockListen(ctx, p)
	if err != nil {
		return nil, err
	}
	l := &lateListener{in: in, ch: make(chan batondriver.LockNotice, 1), done: make(chan struct{})}
	l.ch <- batondriver.LockNotice{Recheck: true} // read once queued
	return l, nil
}

func (d *recheckFails) LockAcquire(ctx context.Context, p *batondriver.LockAcquireParams) (*batondriver.LockAcquireResult, error) {
	if p.Recheck && (d.always || d.times.Add(-1) >= 0) {
		return nil, errors.New("injected: connection reset")
	}
	return d.LockDriver.LockAcquire(ctx, p)
}

// TestFailedRecheckGivesUpThePlace: an Acquire whose rechecks keep failing
// returns an error once its place could have lapsed (WaitTTL after its
// last call that reached the backend), not before, and leaves the queue:
// its place would else be kept until WaitTTL, holding up the waiters
// behind it, and the slot could be granted to nobody.
func TestFailedRecheckGivesUpThePlace(t *testing.T) {
	backends(t, func(t *testing.T, d batondriver.LockDriver) {
		l := newLocker(t, d, nil)
		const waitTTL = 300 * time.Millisecond
		fails := &recheckFails{LockDriver: d, always: true}
		failing := newLocker(t, fails, &batonlock.Config{WaitTTL: waitTTL, Logger: slog.New(slog.DiscardHandler)})
		ctx := context.Background()
		holder, err := l.TryAcquire(ctx, "recheck", nil)
		require.NoError(t, err)
		began := time.Now()
		_, err = failing.Acquire(ctx, "recheck", nil)
		took := time.Since(began)
		require.ErrorContains(t, err, "injected")
		require.Greater(t, took, waitTTL/2, "gave up while its place was alive")
		require.Less(t, took, waitTTL+time.Second, "kept trying past its place's life")
		info, err := l.Inspect(ctx, "recheck")
		require.NoError(t, err)
		require.Zero(t, info.WaiterCount, "a waiter whose recheck failed kept its place")
		require.NoError(t, holder.Release(ctx))
		next, err := l.TryAcquire(ctx, "recheck", nil)
		require.NoError(t, err, "the slot went to a waiter that had returned")
		require.NoError(t, next.Release(ctx))
	})
}

// TestRecheckOutageKeepsThePlace: rechecks that fail for a while (a
// connection cut, a Cluster failover) are made again, and the waiter keeps
// its place in line: granted before a waiter that queued after it.
func TestRecheckOutageKeepsThePlace(t *testing.T) {
	backends(t, func(t *testing.T, d batondriver.LockDriver) {
		l := newLocker(t, d, nil)
		fails := &recheckFails{LockDriver: d}
		fails.times.Store(3)
		// Rechecks every WaitTTL/3 (its listener hears no grant).
		flaky := newLocker(t, fails, &batonlock.Config{WaitTTL: 600 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		holder, err := l.TryAcquire(ctx, "outage", nil)
		require.NoError(t, err)
		began := time.Now()
		type got struct {
			lease *batonlock.Lease
			err   error
		}
		first := make(chan got, 1)
		go func() {
			lease, err := flaky.Acquire(ctx, "outage", nil)
			first <- got{lease, err}
		}()
		require.Eventually(t, func() bool { return fails.times.Load() < 0 }, 5*time.Second, time.Millisecond,
			"its rechecks failed, and were made again")
		queued := make(chan struct{})
		second := make(chan got, 1)
		go func() {
			lease, err := l.Acquire(ctx, "outage", &batonlock.AcquireOpts{OnWait: func(int) { close(queued) }})
			second <- got{lease, err}
		}()
		<-queued
		require.NoError(t, holder.Release(ctx))
		g := <-first
		require.NoError(t, g.err, "the outage ended the wait after %v", time.Since(began))
		require.NoError(t, g.lease.Release(ctx))
		g = <-second
		require.NoError(t, g.err)
		require.NoError(t, g.lease.Release(ctx))
	})
}

// firstExtendFails fails the first extension, as a dropped connection
// does, and closes renewed once a later one succeeded.
type firstExtendFails struct {
	batondriver.LockDriver
	calls   atomic.Int32
	renewed chan struct{}
}

func (d *firstExtendFails) LockExtend(ctx context.Context, p *batondriver.LockExtendParams) (*batondriver.LockExtendResult, error) {
	if d.calls.Add(1) == 1 {
		return nil, errors.New("injected: connection reset")
	}
	res, err := d.LockDriver.LockExtend(ctx, p)
	if err == nil && res.Extended && d.calls.Load() == 2 {
		close(d.renewed)
	}
	return res, err
}

// TestFailedHeartbeatRetriesSooner: a failed heartbeat is retried after a
// quarter of the interval, not a whole one: with an interval over half the
// TTL, a retry a whole interval later would come after the lease ran out.
func TestFailedHeartbeatRetriesSooner(t *testing.T) {
	t.Parallel()
	d := &firstExtendFails{LockDriver: batonmem.New(), renewed: make(chan struct{})}
	l := newLocker(t, d, &batonlock.Config{Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()
	// Heartbeat at 600ms fails; its retry at 750ms is well before Until
	// (988ms); one at 1200ms would be too late.
	lease, err := l.TryAcquire(ctx, "retry", &batonlock.AcquireOpts{TTL: time.Second, HeartbeatInterval: 600 * time.Millisecond})
	require.NoError(t, err)
	select {
	case <-d.renewed:
	case <-lease.Done():
		require.Failf(t, "the lease ran out before the failed heartbeat was retried", "Err: %v", lease.Err())
	}
	require.NoError(t, lease.Err())
	require.NoError(t, lease.Release(ctx))
}

// TestOnWaitOnlyWhenWaiting: Acquire calls OnWait only when the caller has
// to wait, once, with its place in the queue.
func TestOnWaitOnlyWhenWaiting(t *testing.T) {
	t.Parallel()
	l := newLocker(t, batonmem.New(), nil)
	ctx := context.Background()
	var waits []int
	opts := &batonlock.AcquireOpts{OnWait: func(pos int) { waits = append(waits, pos) }}
	holder, err := l.Acquire(ctx, "onwait", opts)
	require.NoError(t, err)
	require.Empty(t, waits, "OnWait was called for a slot granted at once")
	got := make(chan *batonlock.Lease)
	queued := make(chan struct{})
	go func() {
		lease, err := l.Acquire(ctx, "onwait", &batonlock.AcquireOpts{OnWait: func(pos int) {
			waits = append(waits, pos)
			close(queued)
		}})
		require.NoError(t, err)
		got <- lease
	}()
	<-queued
	require.NoError(t, holder.Release(ctx))
	lease := <-got
	require.Equal(t, []int{1}, waits)
	require.NoError(t, lease.Release(ctx))
}
