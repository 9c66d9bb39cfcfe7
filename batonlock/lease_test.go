package batonlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/batonlock"
)

// slowReply holds back the reply of an extension by TTL slow until held is
// closed; the backend has already run it.
type slowReply struct {
	batondriver.LockDriver
	slow    time.Duration
	ran     chan struct{} // closed when the slow extension has run
	held    chan struct{}
	shortIn chan struct{} // closed when another extension has run
}

func (d *slowReply) LockExtend(ctx context.Context, p *batondriver.LockExtendParams) (*batondriver.LockExtendResult, error) {
	res, err := d.LockDriver.LockExtend(ctx, p)
	if p.TTL == d.slow {
		close(d.ran)
		<-d.held
	} else {
		close(d.shortIn)
	}
	return res, err
}

// TestExtendRepliesOutOfOrder: two extensions whose replies come back in
// the other order than the backend ran them must not leave Until past the
// backend's expiry.
func TestExtendRepliesOutOfOrder(t *testing.T) {
	t.Parallel()
	d := &slowReply{LockDriver: batonmem.New(), slow: 5 * time.Second,
		ran: make(chan struct{}), held: make(chan struct{}), shortIn: make(chan struct{})}
	l := newLocker(t, d, nil)
	ctx := context.Background()
	lease, err := l.TryAcquire(ctx, "order", &batonlock.AcquireOpts{TTL: time.Second, NoHeartbeat: true})
	require.NoError(t, err)

	long := make(chan error)
	go func() { long <- lease.Extend(ctx, 5*time.Second) }()
	<-d.ran
	short := make(chan error)
	go func() { short <- lease.Extend(ctx, 100*time.Millisecond) }()
	select {
	case <-d.shortIn: // ran before the first one's reply was in
	case <-time.After(100 * time.Millisecond):
	}
	close(d.held)
	require.NoError(t, <-long)
	require.NoError(t, <-short)

	info, err := l.Inspect(ctx, "order")
	require.NoError(t, err)
	require.Len(t, info.Holders, 1)
	expires := time.Now().Add(info.Holders[0].TTL)
	require.False(t, lease.Until().After(expires),
		"Until %v past the backend's expiry", lease.Until().Sub(expires))
	require.NoError(t, lease.Release(ctx))
}

// hangingExtend never answers an extension: its call waits for its
// context, as one to an unreachable backend does.
type hangingExtend struct {
	batondriver.LockDriver
	started chan struct{}
}

func (d *hangingExtend) LockExtend(ctx context.Context, _ *batondriver.LockExtendParams) (*batondriver.LockExtendResult, error) {
	select {
	case d.started <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestReleaseDoesNotWaitForHeartbeat: Release must not wait for a
// heartbeat stuck on an unanswered call, which lasts until Until.
func TestReleaseDoesNotWaitForHeartbeat(t *testing.T) {
	t.Parallel()
	d := &hangingExtend{LockDriver: batonmem.New(), started: make(chan struct{}, 1)}
	l := newLocker(t, d, nil)
	ctx := context.Background()
	lease, err := l.TryAcquire(ctx, "stuck", &batonlock.AcquireOpts{TTL: 3 * time.Second, HeartbeatInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	<-d.started
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	begin := time.Now()
	require.NoError(t, lease.Release(rctx))
	require.Less(t, time.Since(begin), time.Second, "Release waited for the heartbeat's call")
	require.ErrorIs(t, lease.Err(), batonlock.ErrReleased)
}

// TestHeartbeatFollowsShorterTTL: after Extend shortens the TTL below the
// heartbeat interval, the heartbeat still keeps the lease.
func TestHeartbeatFollowsShorterTTL(t *testing.T) {
	t.Parallel()
	l := newLocker(t, batonmem.New(), nil)
	ctx := context.Background()
	lease, err := l.TryAcquire(ctx, "shorter", &batonlock.AcquireOpts{TTL: 3 * time.Second})
	require.NoError(t, err)
	// 300ms, not less: on a loaded machine (other suites running) the
	// heartbeat's calls at a third of 150ms failed their deadline.
	require.NoError(t, lease.Extend(ctx, 300*time.Millisecond))
	time.Sleep(1200 * time.Millisecond)
	require.NoError(t, lease.Err(), "the heartbeat (every second) came too late for a TTL of 300ms")
	require.NoError(t, lease.Release(ctx))
}

// TestConcurrentReleasesBothSucceed: two goroutines releasing one lease at
// once (a deferred Release and a shutdown's) both succeed; neither reports
// the lease lost, which it was not.
func TestConcurrentReleasesBothSucceed(t *testing.T) {
	t.Parallel()
	l := newLocker(t, batonmem.New(), nil)
	ctx := context.Background()
	for i := range 200 {
		lease, err := l.TryAcquire(ctx, "twice", nil)
		require.NoError(t, err, "round %d", i)
		errs := make(chan error, 2)
		start := make(chan struct{})
		for range 2 {
			go func() {
				<-start
				errs <- lease.Release(ctx)
			}()
		}
		close(start)
		require.NoError(t, <-errs, "round %d", i)
		require.NoError(t, <-errs, "round %d", i)
	}
}
