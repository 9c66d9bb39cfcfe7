package batonlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver/batonmem"
)

// TestErrReadsTheClock: once Until has passed, Err says the lease expired
// and its context ends, even if the expiry timer has not fired yet (a
// loaded machine runs it late): a holder that checks Err before a write
// must not be told the lease is trusted while another may hold the slot.
func TestErrReadsTheClock(t *testing.T) {
	t.Parallel()
	l, err := New(batonmem.New(), nil)
	require.NoError(t, err)
	ctx := context.Background()
	ls, err := l.TryAcquire(ctx, "clock", &AcquireOpts{TTL: 3 * MinTTL, NoHeartbeat: true})
	require.NoError(t, err)
	ls.mu.Lock()
	ls.expiry.Stop() // the timer is late
	ls.mu.Unlock()
	require.NoError(t, ls.Err())
	time.Sleep(time.Until(ls.Until()) + time.Millisecond)
	require.ErrorIs(t, ls.Err(), ErrLeaseExpired)
	require.ErrorIs(t, context.Cause(ls.Context()), ErrLeaseExpired)
	_ = ls.Release(ctx)
}
