package batonlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batonlock"
)

// lateDriver holds up the first `late` acquire calls for `delay`: before
// the call reaches the backend (request), as a network that delays the
// request does, or after it (reply), as one that delays the reply does.
// Either way the locker hears of the grant more than a TTL after it sent
// the call.
type lateDriver struct {
	batondriver.LockDriver
	delay   time.Duration
	request bool
	late    atomic.Int32
}

func (d *lateDriver) LockAcquire(ctx context.Context, p *batondriver.LockAcquireParams) (*batondriver.LockAcquireResult, error) {
	hold := d.late.Add(-1) >= 0
	if hold && d.request {
		time.Sleep(d.delay)
	}
	res, err := d.LockDriver.LockAcquire(ctx, p)
	if hold && !d.request {
		time.Sleep(d.delay)
	}
	return res, err
}

// A grant that arrives after its lease could be trusted is never handed
// out as an ended lease. If the backend still holds it (the request was
// late, so the backend's lease began late too), it is confirmed and the
// lease lasts from the confirmation; if not (the reply was late),
// TryAcquire says so with ErrLeaseExpired, and Acquire queues again and
// is granted. Before, both returned a lease whose context had ended.
func TestLateGrantIsConfirmedOrRefused(t *testing.T) {
	const ttl = 100 * time.Millisecond
	opts := &batonlock.AcquireOpts{TTL: ttl}
	live := func(t *testing.T, lease *batonlock.Lease) {
		t.Helper()
		require.NoError(t, lease.Err(), "handed out already ended")
		require.True(t, time.Until(lease.Until()) > ttl/2, "Until %v from now", time.Until(lease.Until()))
		require.NoError(t, lease.Release(context.Background()))
	}
	backends(t, func(t *testing.T, d batondriver.LockDriver) {
		t.Run("request late, TryAcquire confirms", func(t *testing.T) {
			ld := &lateDriver{LockDriver: d, delay: 2 * ttl, request: true}
			ld.late.Store(1)
			l := newLocker(t, ld, nil)
			lease, err := l.TryAcquire(t.Context(), "late-request", opts)
			require.NoError(t, err)
			live(t, lease)
		})
		t.Run("reply late, TryAcquire refuses", func(t *testing.T) {
			ld := &lateDriver{LockDriver: d, delay: 2 * ttl}
			ld.late.Store(1)
			l := newLocker(t, ld, nil)
			lease, err := l.TryAcquire(t.Context(), "late-reply", opts)
			require.ErrorIs(t, err, batonlock.ErrLeaseExpired)
			require.ErrorContains(t, err, `batonlock: acquire "late-reply": granted, but the reply came after the lease ran out`)
			require.Nil(t, lease)
			ran, err := l.TryDo(t.Context(), "late-reply", opts, func(context.Context, *batonlock.Lease) error { return nil })
			require.NoError(t, err)
			require.True(t, ran, "the key is free again")
		})
		t.Run("reply late, Acquire queues again", func(t *testing.T) {
			ld := &lateDriver{LockDriver: d, delay: 2 * ttl}
			ld.late.Store(1)
			l := newLocker(t, ld, nil)
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			lease, err := l.Acquire(ctx, "late-acquire", opts)
			require.NoError(t, err)
			require.Equal(t, int32(-1), ld.late.Load(), "asked once more after the late grant")
			live(t, lease)
		})
	})
}
