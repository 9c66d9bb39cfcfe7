package batonlock_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batonlock"
	"github.com/batonhq/baton/internal/redistest"
)

// countRechecks counts a waiter's rechecks (LockAcquireParams.Recheck).
type countRechecks struct {
	batondriver.LockDriver
	n atomic.Int64
}

func (d *countRechecks) LockAcquire(ctx context.Context, p *batondriver.LockAcquireParams) (*batondriver.LockAcquireResult, error) {
	if p.Recheck {
		d.n.Add(1)
	}
	return d.LockDriver.LockAcquire(ctx, p)
}

// TestPromptNoticeTakesNoRecheck: a waiter granted a slot by a notice that
// comes at once trusts it without asking the backend again. Redis reports
// its clock in whole milliseconds, so a grant made in the millisecond
// after the waiter's call ran reads up to 1ms later than it was: a notice
// that arrives within that millisecond must not be taken for one from a
// clock that jumped forward, or a quick hand-over costs a round trip more.
//
// It failed before the grant time was read as early as the rounding
// allows: 6 to 16 of 100 hand-overs on loopback made a recheck.
func TestPromptNoticeTakesNoRecheck(t *testing.T) {
	t.Parallel()
	d := &countRechecks{LockDriver: redisDriver(t, redistest.SharedServer(t).Addr())}
	l := newLocker(t, d, nil)
	ctx := context.Background()
	const rounds = 100
	for range rounds {
		holder, err := l.TryAcquire(ctx, "quick", nil)
		require.NoError(t, err)
		queued := make(chan struct{})
		got := make(chan error, 1)
		go func() {
			lease, err := l.Acquire(ctx, "quick", &batonlock.AcquireOpts{OnWait: func(int) { close(queued) }})
			if err == nil {
				err = lease.Release(ctx)
			}
			got <- err
		}()
		<-queued
		require.NoError(t, holder.Release(ctx))
		select {
		case err := <-got:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("the waiter was not granted the released key")
		}
	}
	require.Zero(t, d.n.Load(), "rechecks in %d hand-overs by prompt notice", rounds)
}

// TestRecheckOutageEndsWithTheContext: an Acquire whose context ends while
// it waits out a failing recheck returns the context's error, as any
// Acquire whose context ends does, not the recheck's: a caller tells a
// deadline from a backend failure by it.
//
// It failed before the pause between rechecks returned the context's
// cause: the error was the injected connection reset alone.
func TestRecheckOutageEndsWithTheContext(t *testing.T) {
	backends(t, func(t *testing.T, d batondriver.LockDriver) {
		l := newLocker(t, d, nil)
		fails := &recheckFails{LockDriver: d, always: true}
		failing := newLocker(t, fails, &batonlock.Config{WaitTTL: 30 * time.Second, Logger: slog.New(slog.DiscardHandler)})
		ctx := context.Background()
		holder, err := l.TryAcquire(ctx, "outage-ctx", nil)
		require.NoError(t, err)
		defer func() { require.NoError(t, holder.Release(ctx)) }()
		tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err = failing.Acquire(tctx, "outage-ctx", nil)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorContains(t, err, `acquire "outage-ctx"`)
		require.ErrorContains(t, err, "injected", "the recheck's failure is told too")
	})
}
