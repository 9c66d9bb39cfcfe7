package batonlock_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/batonlock"
)

func newLocker(t *testing.T, d batondriver.LockDriver, cfg *batonlock.Config) *batonlock.Locker {
	t.Helper()
	l, err := batonlock.New(d, cfg)
	require.NoError(t, err)
	return l
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	_, err := batonlock.New(nil, nil)
	require.ErrorContains(t, err, "nil driver")
	_, err = batonlock.New(batonmem.New(), &batonlock.Config{TTL: time.Millisecond})
	require.ErrorContains(t, err, "Config.TTL 1ms shorter than 10ms")
	_, err = batonlock.New(batonmem.New(), &batonlock.Config{WaitTTL: 5 * time.Millisecond})
	require.ErrorContains(t, err, "Config.WaitTTL")
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	l := newLocker(t, batonmem.New(), nil)
	ctx := context.Background()
	for _, tc := range []struct {
		key  string
		opts *batonlock.AcquireOpts
		want string
	}{
		{"", nil, "empty key"},
		{strings.Repeat("k", batonlock.MaxKeyLen+1), nil, "longer than 4096"},
		{"k", &batonlock.AcquireOpts{Limit: -1}, "Limit -1 out of range"},
		{"k", &batonlock.AcquireOpts{Limit: batonlock.MaxLimit + 1}, "out of range"},
		{"k", &batonlock.AcquireOpts{TTL: -time.Second}, "TTL -1s shorter than 10ms"},
		{"k", &batonlock.AcquireOpts{TTL: time.Millisecond}, "TTL 1ms shorter"},
		{"k", &batonlock.AcquireOpts{TTL: time.Second, HeartbeatInterval: time.Second}, "HeartbeatInterval 1s must be positive and shorter than TTL"},
		{"k", &batonlock.AcquireOpts{HeartbeatInterval: -time.Second}, "HeartbeatInterval"},
	} {
		_, err := l.TryAcquire(ctx, tc.key, tc.opts)
		require.ErrorContains(t, err, tc.want)
		_, err = l.Acquire(ctx, tc.key, tc.opts)
		require.ErrorContains(t, err, tc.want)
	}
	require.ErrorContains(t, l.SetLimit(ctx, "k", -1), "limit -1 out of range")
	require.ErrorContains(t, l.SetLimit(ctx, "", 1), "empty key")
	_, err := l.Inspect(ctx, "")
	require.ErrorContains(t, err, "empty key")

	lease, err := l.TryAcquire(ctx, "k", nil)
	require.NoError(t, err)
	require.ErrorContains(t, lease.Extend(ctx, 0), "TTL 0s shorter than 10ms")
	require.NoError(t, lease.Release(ctx))
}

func TestLeaseAccessors(t *testing.T) {
	backends(t, func(t *testing.T, d batondriver.LockDriver) {
		l := newLocker(t, d, nil)
		ctx := context.Background()
		before := time.Now()
		lease, err := l.TryAcquire(ctx, "acc", &batonlock.AcquireOpts{TTL: time.Second})
		require.NoError(t, err)
		require.Equal(t, "acc", lease.Key())
		require.Regexp(t, `^[A-Za-z0-9_-]{22}$`, lease.Token(), "128 bits in base64url, which holds no ':' or '|' (batondriver.LockAcquireParams.Token)")
		require.NotZero(t, lease.Fence())
		require.NoError(t, lease.Err())
		// Until is no later than the backend's expiry less the margin.
		require.True(t, lease.Until().Before(before.Add(time.Second)))
		require.True(t, lease.Until().After(before.Add(900*time.Millisecond)))

		require.NoError(t, lease.Release(ctx))
		<-lease.Done()
		require.ErrorIs(t, lease.Err(), batonlock.ErrReleased)
		require.NoError(t, lease.Release(ctx), "a second release is harmless")
		require.ErrorIs(t, lease.Extend(ctx, time.Second), batonlock.ErrReleased, "a released lease never revives")
	})
}

func TestHeartbeatKeepsLease(t *testing.T) {
	backends(t, func(t *testing.T, d batondriver.LockDriver) {
		l := newLocker(t, d, nil)
		ctx := context.Background()
		lease, err := l.TryAcquire(ctx, "hb", &batonlock.AcquireOpts{TTL: 150 * time.Millisecond})
		require.NoError(t, err)
		first := lease.Until()
		time.Sleep(500 * time.Millisecond) // over three TTLs
		require.NoError(t, lease.Err(), "the heartbeat should have kept the lease")
		require.True(t, lease.Until().After(first))
		_, err = l.TryAcquire(ctx, "hb", nil)
		require.ErrorIs(t, err, batonlock.ErrNotAcquired)
		require.NoError(t, lease.Release(ctx))
	})
}

func TestNoHeartbeatExpiresBeforeBackend(t *testing.T) {
	backends(t, func(t *testing.T, d batondriver.LockDriver) {
		l := newLocker(t, d, nil)
		ctx := context.Background()
		lease, err := l.TryAcquire(ctx, "nohb", &batonlock.AcquireOpts{TTL: 200 * time.Millisecond, NoHeartbeat: true})
		returned := time.Now()
		require.NoError(t, err)
		// The holder's validity ends a margin (1% of the TTL, and 2ms) before the
		// backend's expiry, which started no earlier than the locker sent
		// the request, itself before the call returned. (Measured from
		// before the call, the bound would fail whenever the locker took
		// more than the margin to send it, as on a loaded machine.)
		require.False(t, lease.Until().After(returned.Add(196*time.Millisecond)), "Until leaves no margin")
		<-lease.Done()
		require.ErrorIs(t, lease.Err(), batonlock.ErrLeaseExpired)
		require.False(t, time.Now().Before(lease.Until()), "the context ended before Until")
		require.Eventually(t, func() bool {
			next, err := l.TryAcquire(ctx, "nohb", nil)
			if err == nil {
				require.Greater(t, next.Fence(), lease.Fence())
				require.NoError(t, next.Release(ctx))
			}
			return err == nil
		}, 2*time.Second, 5*time.Millisecond)
		require.ErrorIs(t, lease.Release(ctx), batonlock.ErrNotHeld)
	})
}

func TestExtendMovesUntil(t *testing.T) {
	backends(t, func(t *testing.T, d batondriver.LockDriver) {
		l := newLocker(t, d, nil)
		ctx := context.Background()
		lease, err := l.TryAcquire(ctx, "ext", &batonlock.AcquireOpts{TTL: 100 * time.Millisecond, NoHeartbeat: true})
		require.NoError(t, err)
		require.NoError(t, lease.Extend(ctx, 2*time.Second))
		require.True(t, time.Until(lease.Until()) > time.Second)
		time.Sleep(150 * time.Millisecond)
		require.NoError(t, lease.Err())
		require.NoError(t, lease.Release(ctx))
	})
}

// lossyDriver reports every extension as failed: the lease was lost.
type lossyDriver struct{ batondriver.LockDriver }

func (lossyDriver) LockExtend(context.Context, *batondriver.LockExtendParams) (*batondriver.LockExtendResult, error) {
	return &batondriver.LockExtendResult{}, nil
}

func TestLostLeaseCancelsContext(t *testing.T) {
	t.Parallel()
	l := newLocker(t, lossyDriver{batonmem.New()}, nil)
	ctx := context.Background()
	lease, err := l.TryAcquire(ctx, "lost", &batonlock.AcquireOpts{TTL: time.Second, HeartbeatInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	select {
	case <-lease.Done():
	case <-time.After(500 * time.Millisecond):
		t.Fatal("a lost lease's context was not cancelled at the next heartbeat")
	}
	require.ErrorIs(t, lease.Err(), batonlock.ErrNotHeld)
	require.NoError(t, lease.Release(ctx)) // the memory backend still had it
}

// failingDriver fails every extension, as an unreachable backend would.
type failingDriver struct{ batondriver.LockDriver }

func (failingDriver) LockExtend(context.Context, *batondriver.LockExtendParams) (*batondriver.LockExtendResult, error) {
	return nil, errors.New("connection refused")
}

func TestUnconfirmedLeaseExpiresBeforeTTL(t *testing.T) {
	t.Parallel()
	l := newLocker(t, failingDriver{batonmem.New()}, &batonlock.Config{Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()
	start := time.Now()
	lease, err := l.TryAcquire(ctx, "unconfirmed", &batonlock.AcquireOpts{TTL: 300 * time.Millisecond})
	require.NoError(t, err)
	// The lease gives itself up before the TTL can run out (when its timer
	// fires is the machine's: a loaded one runs it late, and Err reads the
	// clock for that).
	require.Less(t, lease.Until().Sub(start), 300*time.Millisecond, "the lease is trusted until the TTL runs out")
	<-lease.Done()
	require.ErrorIs(t, lease.Err(), batonlock.ErrLeaseExpired)
	require.NoError(t, lease.Release(ctx))
}

func TestAcquireWaitsFIFO(t *testing.T) {
	backends(t, func(t *testing.T, d batondriver.LockDriver) {
		l := newLocker(t, d, nil)
		ctx := context.Background()
		holder, err := l.TryAcquire(ctx, "fifo", nil)
		require.NoError(t, err)
		const n = 8
		var (
			mu    sync.Mutex
			order []int
			wg    sync.WaitGroup
		)
		for i := range n {
			queued := make(chan int)
			wg.Add(1)
			go func() {
				defer wg.Done()
				require.NoError(t, l.Do(ctx, "fifo", &batonlock.AcquireOpts{OnWait: func(pos int) { queued <- pos }}, func(ctx context.Context, lease *batonlock.Lease) error {
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					return nil
				}))
			}()
			require.Equal(t, i+1, <-queued) // queue them one after another
		}
		_, err = l.TryAcquire(ctx, "fifo", nil)
		require.ErrorIs(t, err, batonlock.ErrNotAcquired, "TryAcquire barged past waiters")
		require.NoError(t, holder.Release(ctx))
		wg.Wait()
		require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, order)
	})
}

func TestAcquireCancelledGivesBack(t *testing.T) {
	backends(t, func(t *testing.T, d batondriver.LockDriver) {
		l := newLocker(t, d, nil)
		ctx := context.Background()
		holder, err := l.TryAcquire(ctx, "cancel", nil)
		require.NoError(t, err)
		wctx, cancel := context.WithCancel(ctx)
		queued := make(chan struct{})
		done := make(chan error)
		go func() {
			_, err := l.Acquire(wctx, "cancel", &batonlock.AcquireOpts{OnWait: func(int) { close(queued) }})
			done <- err
		}()
		<-queued
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		info, err := l.Inspect(ctx, "cancel")
		require.NoError(t, err)
		require.Zero(t, info.WaiterCount, "a cancelled waiter must leave the queue")
		require.NoError(t, holder.Release(ctx))
		next, err := l.TryAcquire(ctx, "cancel", nil)
		require.NoError(t, err, "the slot must be free: nobody was granted it")
		require.NoError(t, next.Release(ctx))
	})
}

// overtaken passes its waiting LockAcquire calls on to the backend only
// after the caller's next LockRelease has run, and tells the caller that
// its deadline cut the reply off: what happens when a call travels on a
// slow connection and the give-up on a fast one.
type overtaken struct {
	batondriver.LockDriver
	mu      sync.Mutex
	pending []*batondriver.LockAcquireParams
}

func (d *overtaken) LockAcquire(ctx context.Context, p *batondriver.LockAcquireParams) (*batondriver.LockAcquireResult, error) {
	if !p.Wait && !p.Recheck {
		return d.LockDriver.LockAcquire(ctx, p)
	}
	d.mu.Lock()
	d.pending = append(d.pending, p)
	d.mu.Unlock()
	return nil, context.DeadlineExceeded
}

func (d *overtaken) LockRelease(ctx context.Context, p *batondriver.LockReleaseParams) (*batondriver.LockReleaseResult, error) {
	res, err := d.LockDriver.LockRelease(ctx, p)
	d.arrive()
	return res, err
}

// arrive runs the calls held back.
func (d *overtaken) arrive() {
	d.mu.Lock()
	late := d.pending
	d.pending = nil
	d.mu.Unlock()
	for _, p := range late {
		_, _ = d.LockDriver.LockAcquire(context.Background(), p)
	}
}

// TestAcquireCallOvertakenByGiveUp: a waiting call whose reply was cut off
// and that reaches the backend after the waiter gave up neither takes a
// free slot nor queues the waiter (seen on Redis, with its server paused:
// TestFaultRedisPaused).
func TestAcquireCallOvertakenByGiveUp(t *testing.T) {
	backends(t, func(t *testing.T, d batondriver.LockDriver) {
		late := &overtaken{LockDriver: d}
		l := newLocker(t, late, nil)
		ctx := context.Background()
		_, err := l.Acquire(ctx, "overtaken", nil)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		late.arrive() // had Acquire not given up, the call arrives anyway
		info, err := l.Inspect(ctx, "overtaken")
		require.NoError(t, err)
		require.Empty(t, info.Holders, "a slot went to a waiter that had given up")
		require.Zero(t, info.WaiterCount, "a waiter that had given up was queued")
		next, err := l.TryAcquire(ctx, "overtaken", nil)
		require.NoError(t, err, "the slot must be free")
		require.NoError(t, next.Release(ctx))
	})
}

func TestAcquireTimeout(t *testing.T) {
	backends(t, func(t *testing.T, d batondriver.LockDriver) {
		l := newLocker(t, d, nil)
		ctx := context.Background()
		holder, err := l.TryAcquire(ctx, "timeout", nil)
		require.NoError(t, err)
		tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err = l.Acquire(tctx, "timeout", nil)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorContains(t, err, `acquire "timeout"`)
		require.NoError(t, holder.Release(ctx))
	})
}

func TestSemaphoreAndDynamicLimit(t *testing.T) {
	backends(t, func(t *testing.T, d batondriver.LockDriver) {
		l := newLocker(t, d, nil)
		ctx := context.Background()
		opts := &batonlock.AcquireOpts{Limit: 3}
		var held []*batonlock.Lease
		for range 3 {
			lease, err := l.TryAcquire(ctx, "sem", opts)
			require.NoError(t, err)
			held = append(held, lease)
		}
		_, err := l.TryAcquire(ctx, "sem", opts)
		require.ErrorIs(t, err, batonlock.ErrNotAcquired)

		// Halt: releases free nothing for newcomers.
		require.NoError(t, l.SetLimit(ctx, "sem", 0))
		require.NoError(t, held[0].Release(ctx))
		granted := make(chan *batonlock.Lease, 4)
		for range 4 {
			go func() {
				lease, err := l.Acquire(ctx, "sem", opts)
				require.NoError(t, err)
				granted <- lease
			}()
		}
		require.Eventually(t, func() bool {
			info, err := l.Inspect(ctx, "sem")
			require.NoError(t, err)
			return info.WaiterCount == 4
		}, 2*time.Second, 5*time.Millisecond)
		require.Empty(t, granted)

		// Raise: waiters are granted at once, up to the new limit (2 held + 3 = 5).
		require.NoError(t, l.SetLimit(ctx, "sem", 5))
		for range 3 {
			held = append(held, <-granted)
		}
		info, err := l.Inspect(ctx, "sem")
		require.NoError(t, err)
		require.Equal(t, 5, info.Limit)
		require.True(t, info.Override)
		require.Len(t, info.Holders, 5)
		require.Equal(t, 1, info.WaiterCount)

		require.NoError(t, l.ResetLimit(ctx, "sem"))
		for _, lease := range held[1:] {
			require.NoError(t, lease.Release(ctx))
		}
		last := <-granted
		require.NoError(t, last.Release(ctx))
	})
}

func TestTryDo(t *testing.T) {
	backends(t, func(t *testing.T, d batondriver.LockDriver) {
		l := newLocker(t, d, nil)
		ctx := context.Background()
		boom := errors.New("boom")
		ran, err := l.TryDo(ctx, "trydo", nil, func(ctx context.Context, lease *batonlock.Lease) error {
			// While it runs, a twin cannot.
			twinRan, err := l.TryDo(ctx, "trydo", nil, func(context.Context, *batonlock.Lease) error { return nil })
			require.NoError(t, err)
			require.False(t, twinRan)
			return boom
		})
		require.True(t, ran)
		require.ErrorIs(t, err, boom)

		func() {
			defer func() { require.Equal(t, "panic in fn", recover()) }()
			_, _ = l.TryDo(ctx, "trydo", nil, func(context.Context, *batonlock.Lease) error { panic("panic in fn") })
		}()
		ran, err = l.TryDo(ctx, "trydo", nil, func(context.Context, *batonlock.Lease) error { return nil })
		require.True(t, ran, "a panicking fn must still release")
		require.NoError(t, err)
	})
}

func TestDoReportsLostLease(t *testing.T) {
	backends(t, func(t *testing.T, d batondriver.LockDriver) {
		l := newLocker(t, d, nil)
		ctx := context.Background()
		var calls atomic.Int32
		err := l.Do(ctx, "dolost", &batonlock.AcquireOpts{TTL: 100 * time.Millisecond, NoHeartbeat: true}, func(ctx context.Context, lease *batonlock.Lease) error {
			calls.Add(1)
			<-ctx.Done() // the lease runs out under fn
			require.ErrorIs(t, context.Cause(ctx), batonlock.ErrLeaseExpired)
			time.Sleep(50 * time.Millisecond) // and the backend's expiry passes too
			return nil
		})
		require.ErrorIs(t, err, batonlock.ErrLeaseExpired)
		require.Equal(t, int32(1), calls.Load())
	})
}

// lateNotices hands a waiter its grant notice only after delay, behind a
// recheck notice: what a waiter sees when a reconnect's recheck and its
// grant are both pending while it was held up for longer than the lease.
type lateNotices struct {
	batondriver.LockDriver
	delay time.Duration
}

func (d *lateNotices) LockListen(ctx context.Context, p *batondriver.LockListenParams) (batondriver.LockListener, error) {
	in, err := d.LockDriver.LockListen(ctx, p)
	if err != nil {
		return nil, err
	}
	l := &lateListener{in: in, ch: make(chan batondriver.LockNotice, 4), done: make(chan struct{})}
	go func() {
		for first := true; ; first = false {
			select {
			case n := <-in.C():
				if first {
					time.Sleep(d.delay)
					l.ch <- batondriver.LockNotice{Recheck: true}
				}
				l.ch <- n
			case <-l.done:
				return
			}
		}
	}()
	return l, nil
}

type lateListener struct {
	in   batondriver.LockListener
	ch   chan batondriver.LockNotice
	done chan struct{}
	once sync.Once
}

func (l *lateListener) C() <-chan batondriver.LockNotice { return l.ch }

func (l *lateListener) Close() {
	l.once.Do(func() { close(l.done) })
	l.in.Close()
}

// TestAcquireIgnoresStaleGrantNotice: a grant whose lease ran out before
// the waiter acted on it, the slot going to the next waiter, must not be
// taken for a lease when its notice is read after a recheck queued the
// waiter again.
func TestAcquireIgnoresStaleGrantNotice(t *testing.T) {
	t.Parallel()
	d := batonmem.New()
	slow := newLocker(t, &lateNotices{LockDriver: d, delay: 100 * time.Millisecond}, nil)
	l := newLocker(t, d, nil)
	ctx := context.Background()
	holder, err := l.TryAcquire(ctx, "stale", nil)
	require.NoError(t, err)

	type result struct {
		lease *batonlock.Lease
		err   error
	}
	wQueued, xQueued := make(chan struct{}), make(chan struct{})
	w, x := make(chan result, 1), make(chan result, 1)
	go func() {
		lease, err := slow.Acquire(ctx, "stale", &batonlock.AcquireOpts{TTL: 30 * time.Millisecond, NoHeartbeat: true, OnWait: func(int) { close(wQueued) }})
		w <- result{lease, err}
	}()
	<-wQueued
	go func() {
		lease, err := l.Acquire(ctx, "stale", &batonlock.AcquireOpts{OnWait: func(int) { close(xQueued) }})
		x <- result{lease, err}
	}()
	<-xQueued
	// W is granted; its lease runs out before it reads the notice, and
	// its recheck grants the slot to X and queues W again.
	require.NoError(t, holder.Release(ctx))
	xr := <-x
	require.NoError(t, xr.err)
	select {
	case wr := <-w:
		require.NoError(t, wr.err)
		info, err := l.Inspect(ctx, "stale")
		require.NoError(t, err)
		require.Failf(t, "a waiter took a stale grant for a lease", "W: fence %d, Err %v; holders: %+v", wr.lease.Fence(), wr.lease.Err(), info.Holders)
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, xr.lease.Release(ctx))
	wr := <-w
	require.NoError(t, wr.err)
	require.Greater(t, wr.lease.Fence(), xr.lease.Fence())
	require.NoError(t, wr.lease.Release(ctx))
}

// TestBadInputIsBadParams: every call refuses bad input with an error
// wrapping batondriver.ErrBadParams, so that a caller (the CLI, the
// dashboard) tells it from a backend failure.
func TestBadInputIsBadParams(t *testing.T) {
	t.Parallel()
	l := newLocker(t, batonmem.New(), nil)
	ctx := context.Background()
	lease, err := l.TryAcquire(ctx, "ok", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lease.Release(ctx) })
	for name, call := range map[string]func() error{
		"empty key": func() error { _, err := l.TryAcquire(ctx, "", nil); return err },
		"long key":  func() error { _, err := l.Inspect(ctx, strings.Repeat("k", batonlock.MaxKeyLen+1)); return err },
		"limit":     func() error { _, err := l.TryAcquire(ctx, "k", &batonlock.AcquireOpts{Limit: -1}); return err },
		"TTL": func() error {
			_, err := l.TryAcquire(ctx, "k", &batonlock.AcquireOpts{TTL: time.Microsecond})
			return err
		},
		"heartbeat": func() error {
			_, err := l.TryAcquire(ctx, "k", &batonlock.AcquireOpts{HeartbeatInterval: time.Hour})
			return err
		},
		"extend TTL":   func() error { return lease.Extend(ctx, time.Microsecond) },
		"list":         func() error { _, _, err := l.List(ctx, &batonlock.ListOpts{Offset: -1}); return err },
		"SetLimit":     func() error { return l.SetLimit(ctx, "k", -1) },
		"SetLimit key": func() error { return l.SetLimit(ctx, "", 1) },
	} {
		require.ErrorIs(t, call(), batondriver.ErrBadParams, name)
	}
}
